/* Names that differ between the PostgreSQL major versions vsearch builds against (15 to 17). */
#ifndef VSEARCH_PGCOMPAT_H
#define VSEARCH_PGCOMPAT_H

#if PG_VERSION_NUM >= 160000
#include "storage/relfilelocator.h"
typedef RelFileLocator VsRelFileLocator;
#define VsRelationGetLocator(rel) ((rel)->rd_locator)
#else
#include "storage/relfilenode.h"
typedef RelFileNode VsRelFileLocator;
#define VsRelationGetLocator(rel) ((rel)->rd_node)
#endif

#endif							/* VSEARCH_PGCOMPAT_H */
