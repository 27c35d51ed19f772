// weft — umbrella header: everything a program needs.
#pragma once

#include "weft/runtime.hpp"
#include "weft/tasks.hpp"
#include "weft/taskiter.hpp"
