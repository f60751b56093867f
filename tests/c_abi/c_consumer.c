/* c_consumer.c: a C program (C11, no C++) that loads libqmx_c.so through qmx/qmx_c.h as a test bench would:
 * the header compiles as C, the library links from C, and a few results match the OCP tables. Exit 0 on
 * success, 1 with a message on the first difference. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "qmx/qmx_c.h"

static int failures = 0;

static void expect_code(const char* what, uint64_t got, uint64_t want) {
  if (got != want) {
    printf("FAIL %s: got 0x%llx, want 0x%llx\n", what, (unsigned long long)got, (unsigned long long)want);
    ++failures;
  }
}

int main(void) {
  qmx_cast_options opt;
  uint64_t code = 0;
  uint32_t flags = 0;
  double v = 0;
  float x[4] = {448.0f, 1.0f, 1000.0f, -0.5f};
  uint8_t codes[4];
  qmx_cast_options_default(&opt);
  if (qmx_abi_version() != QMX_C_ABI_VERSION) {
    printf("FAIL abi version %d\n", qmx_abi_version());
    return 1;
  }
  /* OCP OFP8 table: 448 is E4M3's 0x7E, 1.0 is 0x38; 1000 saturates (flags: inexact, overflow, saturated). */
  if (qmx_convert("fp32", 0x447A0000u, "e4m3", &opt, 0, &code, &flags) != QMX_OK) {
    printf("FAIL convert: %s\n", qmx_last_error());
    return 1;
  }
  expect_code("1000 -> e4m3", code, 0x7E);
  expect_code("1000 -> e4m3 flags", flags, QMX_FLAG_INEXACT | QMX_FLAG_OVERFLOW | QMX_FLAG_SATURATED);
  if (qmx_convert_f32(x, 4, "e4m3", &opt, 0, 0, codes, NULL) != QMX_OK) return 1;
  expect_code("448", codes[0], 0x7E);
  expect_code("1.0", codes[1], 0x38);
  expect_code("-0.5", codes[3], 0xB0);
  /* Not saturating: E4M3 overflow is NaN (0x7F); AMD's e4m3fnuz overflow is its NaN, 0x80. */
  qmx_cast_options_set(&opt, NULL, "nosat", NULL, NULL, NULL, NULL);
  qmx_convert("fp32", 0x447A0000u, "e4m3", &opt, 0, &code, NULL);
  expect_code("1000 -> e4m3 nosat", code, 0x7F);
  qmx_convert("fp32", 0x447A0000u, "e4m3fnuz", &opt, 0, &code, NULL);
  expect_code("1000 -> e4m3fnuz nosat", code, 0x80);
  if (qmx_decode("e2m1", 0x7, &v) != QMX_OK || v != 6.0) {
    printf("FAIL decode e2m1 0x7: %g\n", v);
    ++failures;
  }
  /* An error is a status and a message. */
  if (qmx_decode("e9m9x", 0, &v) != QMX_ERR_ARGUMENT || strstr(qmx_last_error(), "e9m9x") == NULL) {
    printf("FAIL error path: '%s'\n", qmx_last_error());
    ++failures;
  }
  if (failures == 0) printf("c consumer: ok\n");
  return failures ? 1 : 0;
}
