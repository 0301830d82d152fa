#!/usr/bin/env bash
# Checks the documentation: every relative link in README.md and docs/*.md resolves to a
# file or folder of the repository (anchors and web links are not followed), the README
# stays a page (at most 150 lines), and every figure it quotes appears in a docs page
# its section links (scripts/check_readme_figures.py). Exit 1 naming each fault.
#   scripts/check_docs.sh [REPO_ROOT]
set -euo pipefail
root="${1:-$(cd "$(dirname "$0")/.." && pwd)}"
cd "$root"
status=0
readme_lines=$(wc -l < README.md)
if [ "$readme_lines" -gt 150 ]; then
  echo "README.md: $readme_lines lines; keep it at most 150 (the rest goes to docs/)"
  status=1
fi
python3 scripts/check_readme_figures.py . || status=1
checked=0
for page in README.md docs/*.md; do
  dir=$(dirname "$page")
  # Markdown links and images: ](target) — the target up to ')' or a space.
  while IFS= read -r target; do
    case "$target" in
      http://*|https://*|mailto:*|\#*) continue ;;
    esac
    path="${target%%#*}"
    [ -z "$path" ] && continue
    checked=$((checked + 1))
    if [ ! -e "$dir/$path" ]; then
      echo "$page: link '$target' does not resolve ($dir/$path)"
      status=1
    fi
  done < <(grep -o '\](\([^) ]*\))' "$page" | sed 's/^](\(.*\))$/\1/')
done
echo "check_docs: $checked relative links in README.md and docs/, README $readme_lines lines"
exit "$status"
