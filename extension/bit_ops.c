/*
 * pgvector's distances on bit strings, the companions of binary_quantize(): hamming_distance
 * (`<~>`, the number of differing bits) and jaccard_distance (`<%>`, 1 - |a AND b| / |a OR b|,
 * and 1 when a and b have no set bit in common, as in pgvector).
 */
#include "postgres.h"

#include "fmgr.h"
#include "port/pg_bitutils.h"
#include "utils/varbit.h"

static void
check_same_length(VarBit *a, VarBit *b)
{
	if (VARBITLEN(a) != VARBITLEN(b))
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("different bit lengths %d and %d", VARBITLEN(a), VARBITLEN(b)),
				 errhint("Bit distances compare strings of the same length, such as two "
						 "binary_quantize() results of vectors of the same dimension.")));
}

/* Ones in a[i] op b[i] over the bytes of two equally long strings, 8 bytes at a time.  Bits past
 * the length in the last byte are zero in every varbit, so they never count. */
typedef enum
{
	BITS_XOR,
	BITS_AND
} bits_op;

static uint64
count_ones(const bits8 *a, const bits8 *b, int bytes, bits_op op)
{
	uint64		count = 0;
	int			i = 0;

	for (; i + 8 <= bytes; i += 8)
	{
		uint64		x;
		uint64		y;

		memcpy(&x, a + i, sizeof(x));
		memcpy(&y, b + i, sizeof(y));
		count += pg_popcount64(op == BITS_XOR ? x ^ y : x & y);
	}
	for (; i < bytes; i++)
		count += pg_number_of_ones[op == BITS_XOR ? a[i] ^ b[i] : a[i] & b[i]];
	return count;
}

PG_FUNCTION_INFO_V1(hamming_distance);
Datum
hamming_distance(PG_FUNCTION_ARGS)
{
	VarBit	   *a = PG_GETARG_VARBIT_P(0);
	VarBit	   *b = PG_GETARG_VARBIT_P(1);

	check_same_length(a, b);
	PG_RETURN_FLOAT8((double) count_ones(VARBITS(a), VARBITS(b), VARBITBYTES(a), BITS_XOR));
}

PG_FUNCTION_INFO_V1(jaccard_distance);
Datum
jaccard_distance(PG_FUNCTION_ARGS)
{
	VarBit	   *a = PG_GETARG_VARBIT_P(0);
	VarBit	   *b = PG_GETARG_VARBIT_P(1);
	uint64		both;
	uint64		ones_a;
	uint64		ones_b;

	check_same_length(a, b);
	both = count_ones(VARBITS(a), VARBITS(b), VARBITBYTES(a), BITS_AND);
	if (both == 0)
		PG_RETURN_FLOAT8(1.0);
	ones_a = pg_popcount((const char *) VARBITS(a), VARBITBYTES(a));
	ones_b = pg_popcount((const char *) VARBITS(b), VARBITBYTES(b));
	PG_RETURN_FLOAT8(1.0 - (double) both / (double) (ones_a + ones_b - both));
}
