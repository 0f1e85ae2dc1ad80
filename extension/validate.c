/*
 * Operator class validation (amvalidate) of every vsearch access method, in the manner of
 * contrib/bloom.  An operator class has
 *   OPERATOR 1  a distance, (type, type) -> float8, FOR ORDER BY a btree float family;
 *   OPERATOR 2  (optional) a range test, (type, sphere) -> bool, a search operator;
 *   FUNCTION 1  the metric: (internal) -> int4 returning a vs_metric.
 */
#include "postgres.h"

#include "access/amvalidate.h"
#include "access/htup_details.h"
#include "catalog/pg_amop.h"
#include "catalog/pg_amproc.h"
#include "catalog/pg_opclass.h"
#include "catalog/pg_opfamily.h"
#include "catalog/pg_type.h"
#include "commands/defrem.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/regproc.h"
#include "utils/syscache.h"

#include "amutils.h"

bool
vs_opclass_validate(Oid opclassoid)
{
	bool		result = true;
	char	   *amname;
	HeapTuple	classtup;
	Form_pg_opclass classform;
	Oid			opfamilyoid;
	Oid			opcintype;
	char	   *opclassname;
	HeapTuple	familytup;
	Form_pg_opfamily familyform;
	char	   *opfamilyname;
	CatCList   *proclist,
			   *oprlist;
	List	   *grouplist;
	OpFamilyOpFuncGroup *opclassgroup;
	ListCell   *lc;

	classtup = SearchSysCache1(CLAOID, ObjectIdGetDatum(opclassoid));
	if (!HeapTupleIsValid(classtup))
		elog(ERROR, "cache lookup failed for operator class %u", opclassoid);
	classform = (Form_pg_opclass) GETSTRUCT(classtup);
	opfamilyoid = classform->opcfamily;
	opcintype = classform->opcintype;
	opclassname = NameStr(classform->opcname);
	amname = get_am_name(classform->opcmethod);

	familytup = SearchSysCache1(OPFAMILYOID, ObjectIdGetDatum(opfamilyoid));
	if (!HeapTupleIsValid(familytup))
		elog(ERROR, "cache lookup failed for operator family %u", opfamilyoid);
	familyform = (Form_pg_opfamily) GETSTRUCT(familytup);
	opfamilyname = NameStr(familyform->opfname);

	oprlist = SearchSysCacheList1(AMOPSTRATEGY, ObjectIdGetDatum(opfamilyoid));
	proclist = SearchSysCacheList1(AMPROCNUM, ObjectIdGetDatum(opfamilyoid));

	for (int i = 0; i < proclist->n_members; i++)
	{
		HeapTuple	proctup = &proclist->members[i]->tuple;
		Form_pg_amproc procform = (Form_pg_amproc) GETSTRUCT(proctup);

		if (procform->amproclefttype != procform->amprocrighttype)
		{
			ereport(INFO,
					(errcode(ERRCODE_INVALID_OBJECT_DEFINITION),
					 errmsg("%s operator family \"%s\" contains support function %s with cross-type registration",
							amname, opfamilyname, format_procedure(procform->amproc))));
			result = false;
		}
		if (procform->amprocnum != VS_METRIC_PROC)
		{
			ereport(INFO,
					(errcode(ERRCODE_INVALID_OBJECT_DEFINITION),
					 errmsg("%s operator family \"%s\" contains function %s with invalid support number %d",
							amname, opfamilyname, format_procedure(procform->amproc),
							procform->amprocnum)));
			result = false;
			continue;
		}
		if (!check_amproc_signature(procform->amproc, INT4OID, true, 1, 1, INTERNALOID))
		{
			ereport(INFO,
					(errcode(ERRCODE_INVALID_OBJECT_DEFINITION),
					 errmsg("%s operator family \"%s\" contains function %s with wrong signature for support number %d",
							amname, opfamilyname, format_procedure(procform->amproc),
							procform->amprocnum)));
			result = false;
		}
	}

	for (int i = 0; i < oprlist->n_members; i++)
	{
		HeapTuple	oprtup = &oprlist->members[i]->tuple;
		Form_pg_amop oprform = (Form_pg_amop) GETSTRUCT(oprtup);
		bool		ok;

		switch (oprform->amopstrategy)
		{
			case VS_DISTANCE_STRATEGY:
				ok = oprform->amoppurpose == AMOP_ORDER &&
					OidIsValid(oprform->amopsortfamily) &&
					check_amop_signature(oprform->amopopr, FLOAT8OID,
										 oprform->amoplefttype, oprform->amoprighttype);
				break;
			case VS_RANGE_STRATEGY:
				ok = oprform->amoppurpose == AMOP_SEARCH &&
					!OidIsValid(oprform->amopsortfamily) &&
					check_amop_signature(oprform->amopopr, BOOLOID,
										 oprform->amoplefttype, oprform->amoprighttype);
				break;
			default:
				ereport(INFO,
						(errcode(ERRCODE_INVALID_OBJECT_DEFINITION),
						 errmsg("%s operator family \"%s\" contains operator %s with invalid strategy number %d",
								amname, opfamilyname, format_operator(oprform->amopopr),
								oprform->amopstrategy)));
				result = false;
				continue;
		}
		if (!ok)
		{
			ereport(INFO,
					(errcode(ERRCODE_INVALID_OBJECT_DEFINITION),
					 errmsg("%s operator family \"%s\" contains operator %s with wrong purpose or signature for strategy %d",
							amname, opfamilyname, format_operator(oprform->amopopr),
							oprform->amopstrategy)));
			result = false;
		}
	}

	/* The opclass's own group needs the metric function and the distance operator. */
	grouplist = identify_opfamily_groups(oprlist, proclist);
	opclassgroup = NULL;
	foreach(lc, grouplist)
	{
		OpFamilyOpFuncGroup *group = (OpFamilyOpFuncGroup *) lfirst(lc);

		if (group->lefttype == opcintype && group->righttype == opcintype)
			opclassgroup = group;
	}
	if (opclassgroup == NULL ||
		(opclassgroup->functionset & (((uint64) 1) << VS_METRIC_PROC)) == 0)
	{
		ereport(INFO,
				(errcode(ERRCODE_INVALID_OBJECT_DEFINITION),
				 errmsg("%s operator class \"%s\" is missing support function %d",
						amname, opclassname, VS_METRIC_PROC)));
		result = false;
	}
	if (opclassgroup == NULL ||
		(opclassgroup->operatorset & (((uint64) 1) << VS_DISTANCE_STRATEGY)) == 0)
	{
		ereport(INFO,
				(errcode(ERRCODE_INVALID_OBJECT_DEFINITION),
				 errmsg("%s operator class \"%s\" is missing operator %d",
						amname, opclassname, VS_DISTANCE_STRATEGY)));
		result = false;
	}

	ReleaseCatCacheList(proclist);
	ReleaseCatCacheList(oprlist);
	ReleaseSysCache(familytup);
	ReleaseSysCache(classtup);

	return result;
}
