#!/usr/bin/env bash
# Build llama.cpp's command-line tools once, from the llama.cpp tree vendored in the PyPI sdist of
# llama-cpp-python, and cache the build by version. Prints the folder of the binaries on stdout (the only
# line on stdout); progress goes to stderr. A second run with the build cached prints the folder at once.
#
#   TRACER_LLAMACPP_VERSION  llama-cpp-python sdist version (default 0.3.36)
#   TRACER_LLAMACPP_CACHE    cache folder (default ~/.cache/tracer/llama.cpp-<version>)
#   TRACER_LLAMACPP_SDIST    an already downloaded sdist .tar.gz (default: `pip download` it)
#   TRACER_LLAMACPP_JOBS     parallel compile jobs (default 2)
#
# Cache layout: <cache>/llama.cpp (the source tree: convert_hf_to_gguf.py, gguf-py), <cache>/build,
# <cache>/bin (llama-eval-callback, llama-debug, llama-quantize, llama-tokenize), <cache>/.complete.
set -euo pipefail

version="${TRACER_LLAMACPP_VERSION:-0.3.36}"
cache="${TRACER_LLAMACPP_CACHE:-$HOME/.cache/tracer/llama.cpp-$version}"
jobs="${TRACER_LLAMACPP_JOBS:-2}"
targets=(llama-eval-callback llama-debug llama-quantize llama-tokenize)

if [[ -f "$cache/.complete" ]]; then
  echo "$cache/bin"
  exit 0
fi

mkdir -p "$cache"
exec 9> "$cache/.lock"
flock 9                                   # one build at a time; a second caller waits, then finds it done
if [[ -f "$cache/.complete" ]]; then
  echo "$cache/bin"
  exit 0
fi

if ! command -v cmake > /dev/null 2>&1 || ! command -v g++ > /dev/null 2>&1; then
  apt-get update -qq > /dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq cmake g++ ninja-build > /dev/null
fi

start=$(date +%s)
work="$(mktemp -d "${TMPDIR:-/tmp}/tracer-llamacpp.XXXXXX")"
trap 'rm -rf "$work"' EXIT

# The source tree is unpacked once; an interrupted build resumes where it stopped (ninja/make keep what is built).
if [[ ! -f "$cache/.unpacked" ]]; then
  sdist="${TRACER_LLAMACPP_SDIST:-}"
  if [[ -z "$sdist" ]]; then
    echo "llama.cpp: downloading the llama-cpp-python==$version sdist" >&2
    python3 -m pip download --quiet --no-deps --no-binary=:all: "llama-cpp-python==$version" -d "$work/dl" >&2
    sdist="$(ls "$work"/dl/llama_cpp_python-"$version".tar.gz)"
  fi
  echo "llama.cpp: unpacking $sdist" >&2
  tar -xzf "$sdist" -C "$work" "llama_cpp_python-$version/vendor/llama.cpp"
  rm -rf "$cache/llama.cpp" "$cache/build" "$cache/bin"
  mv "$work/llama_cpp_python-$version/vendor/llama.cpp" "$cache/llama.cpp"
  touch "$cache/.unpacked"
fi

echo "llama.cpp: configuring and building ${targets[*]} with $jobs jobs" >&2
generator=()
command -v ninja > /dev/null 2>&1 && generator=(-G Ninja)
cmake -S "$cache/llama.cpp" -B "$cache/build" "${generator[@]}" \
  -DGGML_NATIVE=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF \
  -DBUILD_SHARED_LIBS=OFF -DCMAKE_BUILD_TYPE=Release > "$cache/cmake-configure.log" 2>&1 \
  || { tail -n 30 "$cache/cmake-configure.log" >&2; exit 1; }
cmake --build "$cache/build" --target "${targets[@]}" -j "$jobs" > "$cache/cmake-build.log" 2>&1 \
  || { tail -n 30 "$cache/cmake-build.log" >&2; exit 1; }

mkdir -p "$cache/bin"
for t in "${targets[@]}"; do
  cp "$cache/build/bin/$t" "$cache/bin/$t"
done
"$cache/bin/llama-tokenize" --help > /dev/null 2>&1 || true
echo "$version $(date -u +%Y-%m-%dT%H:%M:%SZ) $(( $(date +%s) - start ))s" > "$cache/.complete"
echo "llama.cpp: built in $(( $(date +%s) - start )) s" >&2
echo "$cache/bin"
