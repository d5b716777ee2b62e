#!/usr/bin/env bash
# Usage: tests/consumer_test.sh BUILD_DIR [SOURCE_DIR]
# Installs the already built BUILD_DIR into a temporary prefix, builds the separate project
# SOURCE_DIR/tests/consumer against it with find_package(troupe), runs it and checks that it
# prints the installed version; also runs the installed `bin/troupe version` and, when the build
# has the Python package, imports it from the prefix. SOURCE_DIR is the
# repository root (default: the parent of this script's folder). Removes the prefix on exit.
set -euo pipefail

if (($# < 1 || $# > 2)); then
  echo "usage: $0 BUILD_DIR [SOURCE_DIR]" >&2
  exit 2
fi
build=$(cd "$1" && pwd)
src=$(cd "${2:-$(dirname "$0")/..}" && pwd)

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix="$tmp/prefix"

fail() {
  echo "consumer test: FAIL: $*" >&2
  exit 1
}

cmake --install "$build" --prefix "$prefix" >"$tmp/install.log" 2>&1 ||
  { cat "$tmp/install.log" >&2; fail "cmake --install $build"; }

version_file=$(find "$prefix" -path '*/cmake/troupe/troupeConfigVersion.cmake' | head -n 1)
[[ -n "$version_file" ]] || fail "no troupeConfigVersion.cmake installed under $prefix"
version=$(sed -nE 's/^set\(PACKAGE_VERSION "([^"]+)"\)/\1/p' "$version_file")
[[ -n "$version" ]] || fail "no PACKAGE_VERSION in $version_file"

cmake -S "$src/tests/consumer" -B "$tmp/consumer-build" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$tmp/configure.log" 2>&1 ||
  { cat "$tmp/configure.log" >&2; fail "configure tests/consumer"; }
# The package must come from the temporary prefix, not from some other installed troupe.
found=$(sed -nE 's/^troupe_DIR:PATH=(.*)/\1/p' "$tmp/consumer-build/CMakeCache.txt")
[[ "$found" == "$prefix"/* ]] || fail "find_package(troupe) used $found, not $prefix"

cmake --build "$tmp/consumer-build" -j"$(nproc)" >"$tmp/build.log" 2>&1 ||
  { cat "$tmp/build.log" >&2; fail "build tests/consumer"; }

rc=0
out=$(timeout 60 "$tmp/consumer-build/troupe_consumer" </dev/null 2>&1) || rc=$?
((rc == 0)) || { echo "$out" >&2; fail "troupe_consumer exited with $rc"; }
[[ "$out" == *"$version"* ]] || { echo "$out" >&2; fail "troupe_consumer did not print $version"; }
[[ "$out" == *"sharded: 103 107; replicated: 105 105"* ]] ||
  { echo "$out" >&2; fail "troupe_consumer's worker group did not compute the expected results"; }

[[ -x "$prefix/bin/troupe" ]] || fail "no bin/troupe installed"
rc=0
cli=$(timeout 60 "$prefix/bin/troupe" version </dev/null 2>&1) || rc=$?
((rc == 0)) || { echo "$cli" >&2; fail "installed 'troupe version' exited with $rc"; }
[[ "$cli" == *"$version"* ]] || { echo "$cli" >&2; fail "'troupe version' did not print $version"; }

# The Python package, when the build has it: installed under the prefix as the README says
# (PYTHONPATH=P/lib/python3.X/dist-packages), and importable from there.
if compgen -G "$build/python/troupe/_core*.so" >/dev/null; then
  py=/usr/bin/python3
  pyver=$("$py" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
  site="$prefix/lib/python$pyver/dist-packages"
  rc=0
  where=$(cd "$tmp" && PYTHONPATH="$site" timeout 60 "$py" -c 'import troupe; print(troupe.__file__)' \
    </dev/null 2>&1) || rc=$?
  ((rc == 0)) || { echo "$where" >&2; fail "import troupe from $site exited with $rc"; }
  [[ "$where" == "$site"/* ]] || fail "import troupe found $where, not the one in $site"
fi

echo "consumer test: PASS (troupe $version installed, found by find_package, consumer ran)"
