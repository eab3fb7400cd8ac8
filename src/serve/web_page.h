// The page kiln serve shows at / (web/index.html, built into the binary so
// an installed kiln needs no files beside it).
#pragma once

namespace kiln::serve {

extern const char kWebPage[];

}  // namespace kiln::serve
