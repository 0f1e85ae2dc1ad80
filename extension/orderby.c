/*
 * The planner hook that spares a kNN statement from computing its ORDER BY distances a second
 * time.
 *
 * For `SELECT id FROM t ORDER BY v <-> q LIMIT k` PostgreSQL keeps `v <-> q` in the index scan's
 * target list as a resjunk column, so the executor computes it for every row the scan returns --
 * for a vector stored out of line or compressed, a TOAST fetch and a decompression per row -- even
 * though the scan already returns the rows in that order (a vsearch index orders by the operator's
 * own value, or has the executor recheck through the plan's original ORDER BY expressions, never
 * through the target list).  When the plan is Limit nodes over the index scan at the top of a
 * SELECT, nothing reads that column but the junk filter, which throws it away: the hook replaces
 * it by a NULL constant.  Measured on Fashion-MNIST (784 dimensions): the backend's part of one
 * query went from ~0.2 ms to ~0.05 ms (docs/WORKER.md, "Where a query's time goes").
 *
 * Everything else is left alone: a distance the query selects (not resjunk), a sort key read by a
 * Merge Append, Sort, Unique, WindowAgg or any node other than Limit, subplans and CTEs, volatile
 * expressions (their evaluation is a side effect the user asked for), and other access methods.
 */
#include "postgres.h"

#include "nodes/makefuncs.h"
#include "nodes/nodeFuncs.h"
#include "nodes/plannodes.h"
#include "optimizer/optimizer.h"
#include "optimizer/planner.h"
#include "utils/rel.h"
#include "utils/relcache.h"

#include "indexkind.h"
#include "search.h"

static planner_hook_type prev_planner_hook = NULL;

static bool
is_vsearch_index(Oid indexid)
{
	Relation	index = RelationIdGetRelation(indexid);
	bool		ours;

	if (!RelationIsValid(index))
		return false;
	ours = vs_kind_of_index(index) != NULL;
	RelationClose(index);
	return ours;
}

static void
drop_unread_orderby(PlannedStmt *stmt)
{
	Plan	   *plan = stmt->planTree;
	IndexScan  *scan;
	ListCell   *lc;

	if (stmt->commandType != CMD_SELECT || plan == NULL || !IsA(plan, Limit))
		return;
	while (IsA(plan, Limit))
		plan = outerPlan(plan);
	if (plan == NULL || !IsA(plan, IndexScan))
		return;
	scan = (IndexScan *) plan;
	if (scan->indexorderbyorig == NIL || !is_vsearch_index(scan->indexid))
		return;

	foreach(lc, plan->targetlist)
	{
		TargetEntry *tle = lfirst_node(TargetEntry, lc);
		Expr	   *expr = tle->expr;

		if (!tle->resjunk || IsA(expr, Const) || !list_member(scan->indexorderbyorig, expr) ||
			contain_volatile_functions((Node *) expr))
			continue;
		tle->expr = (Expr *) makeNullConst(exprType((Node *) expr), exprTypmod((Node *) expr),
										   exprCollation((Node *) expr));
	}
}

static PlannedStmt *
vs_planner(Query *parse, const char *query_string, int cursorOptions, ParamListInfo boundParams)
{
	PlannedStmt *stmt;

	if (prev_planner_hook)
		stmt = prev_planner_hook(parse, query_string, cursorOptions, boundParams);
	else
		stmt = standard_planner(parse, query_string, cursorOptions, boundParams);
	drop_unread_orderby(stmt);
	return stmt;
}

void
vs_orderby_init(void)
{
	prev_planner_hook = planner_hook;
	planner_hook = vs_planner;
}
