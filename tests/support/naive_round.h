// naive_round.h: the naive table oracle (lib/src/round/naive_round.h), where the tests have always found it.
#pragma once

#include "round/naive_round.h"

namespace qmx::test {
using qmx::detail::NaiveRounder;
}  // namespace qmx::test
