/*
 * Text under edit distance (textdist.c): the operators of the text operator classes of the metric
 * indexes (vs_lc), in the vocabulary of the vector ones (range.c):
 *
 *   text <~> text            Levenshtein distance on characters (float8)
 *   text_sphere              composite (center text, radius float8), built by sphere(text, real)
 *   text <<~>> text_sphere   true iff center <~> row <= radius
 *
 * Characters, not bytes: a string is decoded into one pg_wchar per character (the code point in
 * UTF-8), and the engine's edit distance (vsearch/edit.h) runs on those.
 */
#ifndef VSEARCH_TEXTDIST_H
#define VSEARCH_TEXTDIST_H

#include "postgres.h"

#include "vsearch/edit.h"

/*
 * The metric of the text operator classes (support function 1).  Outside the engine's vector
 * metrics (vs_metric, VS_METRIC_COUNT): no vector entry point accepts it, and only the metric
 * indexes' own code reads it.
 */
#define VS_METRIC_LEVENSHTEIN	16

/* The characters of a text value as uint32 (palloc'd; *len characters). */
extern uint32 *vs_text_chars(text *t, int *len);

/* The edit distance between two strings of characters, interruptible on long strings (ERROR on
 * cancel). */
extern double vs_text_distance(const uint32 *a, int na, const uint32 *b, int nb);

/* Center and radius of a text_sphere; false if either is NULL (then nothing matches). */
extern bool vs_text_sphere_get(Datum sphere, text **center, double *radius);

/* ERROR 22023 unless radius is a valid edit-distance radius (finite, not negative). */
extern void vs_check_text_radius(double radius);

/* The engine's cancel callback for long strings: a query cancel or termination is pending. */
extern int	vs_text_cancel(void *arg);

#endif							/* VSEARCH_TEXTDIST_H */
