/* test_engine_quant_k.c: test_engine_quant.c for the q4 (Q4_K experts) and
 * mxfp4 policies, as a separate binary so each stays well under a minute. */
#define QUANT_FROM 1
#define QUANT_TO 3
#define QUANT_TEST_NAME "test_engine_quant_k"
#include "test_engine_quant.c"
