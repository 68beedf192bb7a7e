// The 16-bit float conversions moved to kernels/half.h (they are no CPU kernel); this header
// stays for code that still includes it here.
#pragma once

#include "kernels/half.h"
