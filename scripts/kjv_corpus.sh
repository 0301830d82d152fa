#!/usr/bin/env bash
# Writes the King James Version of the Bible (Debian packages bible-kjv-text, the text,
# and bible-kjv, the `bible` program that prints it; the translation is from 1611 and in
# the public domain) as one document per chapter, separated by <|endoftext|> lines, in
# canonical book order: 1,189 chapters, about 4.3 MB of English prose.
#   scripts/kjv_corpus.sh OUT_FILE
set -euo pipefail
out="$1"
command -v bible >/dev/null || { echo "kjv_corpus: 'bible' not found (apt-get install bible-kjv)" >&2; exit 1; }
mkdir -p "$(dirname "$out")"
# Lines look like "Ge1:1 In the beginning ..."; a new book or chapter starts a document.
bible -f "Gen1:1-Rev22:21" | awk '
  match($0, /^[0-9]?[A-Za-z]+[0-9]+:/) {
    ref = substr($0, 1, RLENGTH); text = substr($0, index($0, " ") + 1)
    if (ref != last && NR > 1) print "\n<|endoftext|>"
    last = ref; printf "%s ", text; next
  }
  { printf "%s ", $0 }
  END { print "" }' >"$out.tmp"
mv "$out.tmp" "$out"
echo "kjv_corpus: $(grep -c '^<|endoftext|>$' "$out") separators, $(wc -c <"$out") bytes in $out"
