/*
 * vsearch.so: the module's entry point.  The type, operator and index code lives in the other
 * files of extension/; _PG_init is where settings and hooks will be registered.
 */
#include "postgres.h"

#include "fmgr.h"

PG_MODULE_MAGIC;

void		_PG_init(void);

void
_PG_init(void)
{
}
