// main.cc: the Catch2 test runner for qmx-sim (Catch2 v2, as in Debian 12).
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
