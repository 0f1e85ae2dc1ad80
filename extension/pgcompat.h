/* Names that differ between the PostgreSQL major versions vsearch builds against (15 to 17). */
#ifndef VSEARCH_PGCOMPAT_H
#define VSEARCH_PGCOMPAT_H

#if PG_VERSION_NUM >= 160000
#include "storage/relfilelocator.h"
typedef RelFileLocator VsRelFileLocator;
#define VsRelationGetLocator(rel) ((rel)->rd_locator)
#define VsBufTagMatchesLocator(tag, loc) BufTagMatchesRelFileLocator((tag), (loc))
#else
#include "storage/relfilenode.h"
typedef RelFileNode VsRelFileLocator;
#define VsRelationGetLocator(rel) ((rel)->rd_node)
#define VsBufTagMatchesLocator(tag, loc) RelFileNodeEquals((tag)->rnode, *(loc))
#endif

/* Is the user the owner of the relation (or a superuser)? */
#if PG_VERSION_NUM >= 160000
#include "catalog/pg_class.h"
#define VsRelationOwnerCheck(relid, roleid) object_ownercheck(RelationRelationId, (relid), (roleid))
#else
#define VsRelationOwnerCheck(relid, roleid) pg_class_ownercheck((relid), (roleid))
#endif

#endif							/* VSEARCH_PGCOMPAT_H */
