#!/usr/bin/env bash
# make bench-load: the side-by-side load benchmark. Installs wrk and nginx
# from Debian when they are missing, builds sluice, the bare Go proxy and
# the upstream into bench/load/out/bin, and runs every target once
# (bench/load/runner). BEFORE="REV ..." also builds sluice at each git
# revision REV and measures it in the same run. PROFILE=FILE has sluice
# write a CPU profile of its run to FILE (make pgo). Extra arguments go to
# the runner (e.g. -d 4s, -only nginx).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=bench/load/out
mkdir -p "$out/bin"

missing=()
command -v wrk >/dev/null 2>&1 || missing+=(wrk)
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || missing+=(nginx-light)
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing ${missing[*]}" >&2
  sudo=; [ "$(id -u)" -ne 0 ] && sudo=sudo
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# Debian puts nginx in /usr/sbin, which a user's PATH may lack.
export PATH="$PATH:/usr/sbin"
# The package's own service would hold port 80 and is not what is measured.
if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet nginx 2>/dev/null; then
  echo "note: the system nginx service is running; the benchmark starts its own" >&2
fi

GO=${GO:-go}
$GO build -o "$out/bin/sluice" ./cmd/sluice
$GO build -o "$out/bin/bareproxy" ./bench/load/bareproxy
$GO build -o "$out/bin/upstream" ./bench/load/upstream
$GO build -o "$out/bin/runner" ./bench/load/runner

others=
for rev in ${BEFORE:-}; do
  src="$out/src-$rev"
  rm -rf "$src"
  mkdir -p "$src"
  git archive "$rev" | tar -x -C "$src"
  (cd "$src" && $GO build -o ../bin/sluice-"$rev" ./cmd/sluice)
  rm -rf "$src"
  others="${others:+$others,}$rev=$out/bin/sluice-$rev"
done
exec "$out/bin/runner" -out "$out" -bin "$out/bin" -others "$others" ${PROFILE:+-profile "$PROFILE"} "$@"
