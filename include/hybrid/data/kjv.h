// The King James Bible as a byte-level corpus. Debian ships it only compressed (bible-kjv-text),
// so the first use runs `bible` once and caches the plain text.
#pragma once

#include <cstdint>
#include <string>

#include "hybrid/data/token_corpus.h"

namespace ht {

// What bible-kjv 4.38 (Debian 12) gives: one verse per line, the "Ge1:1 " references stripped.
inline constexpr int64_t kKjvVerses = 31102;
inline constexpr int64_t kKjvBytes = 4137850;

// $HT_DATA_DIR, else $XDG_CACHE_HOME/hybrid-trainer, else $HOME/.cache/hybrid-trainer (created).
std::string data_cache_dir();

// Path of the cached kjv.txt, written on first use (temp file + rename, so never half-written).
// Throws naming `apt-get install bible-kjv bible-kjv-text` if the program or its data is missing.
std::string kjv_text_path();

TokenCorpus load_kjv();  // byte-level, vocab 256

}  // namespace ht
