// This build's version: the project version and `git describe` at configure time.
#pragma once

namespace muloco {

const char* MulocoVersion();

}  // namespace muloco
