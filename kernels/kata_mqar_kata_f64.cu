// float64 instantiations of the normalized-KATA mixer core (kata_mqar_kata.cu), in their own translation unit so
// the float and double halves of that template-heavy file compile in parallel.
#define MEMCAP_MQAR_KATA_F64_TU
#include "kata_mqar_kata.cu"
