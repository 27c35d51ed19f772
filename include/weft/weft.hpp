// weft — umbrella header: everything a program needs.
#pragma once

#include "weft/profile.hpp"
#include "weft/runtime.hpp"
#include "weft/tasks.hpp"
#include "weft/flow.hpp"
#include "weft/taskiter.hpp"
#include "weft/cluster.hpp"
