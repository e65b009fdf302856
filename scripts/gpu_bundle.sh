#!/usr/bin/env bash
# Prepare .gpu-bundle/ for scripts/gpu_check.py on a GPU machine that has no network:
# a copy of the PyPI yolov5 package, already patched by yolo-det, in .gpu-bundle/site, plus the packages
# it imports that the GPU image lacks, in .gpu-bundle/wheels (gpu_check.py puts both on sys.path and
# PYTHONPATH; nothing is installed there). About 35 MB, under the device's 64 MiB carry limit. Run here (with network), then carry .gpu-bundle:
#   bash scripts/gpu_bundle.sh && python scripts/gpu_check.py      # on the GPU machine
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/setup_env.sh
bundle=.gpu-bundle
rm -rf "$bundle"
mkdir -p "$bundle/site" "$bundle/wheels" "$bundle/cp312"
grep -qx "/.gpu-bundle/" .git/info/exclude 2>/dev/null || echo "/.gpu-bundle/" >> .git/info/exclude
src="$(.venv/bin/python -c 'import os, warnings; warnings.simplefilter("ignore"); import yolov5; print(os.path.dirname(yolov5.__file__))')"
cp -r "$src" "$bundle/site/yolov5"
find "$bundle/site/yolov5" -name __pycache__ -prune -exec rm -rf {} +
.venv/bin/yolo-det apply-patch "$bundle/site/yolov5"
# What `import yolov5.train` pulls in beyond the GPU image's packages (device KINDS.md list), and
# setuptools<81 for yolov5 7.0's pkg_resources. botocore (30 MB unpacked, imported but unused) stays a
# zipped wheel on sys.path; the rest is unpacked (ultralytics reads data files next to its modules).
py="--python-version 3.12 --implementation cp --only-binary=:all: --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64"
.venv/bin/python -m pip download -q --no-deps $py -d "$bundle/wheels" \
  thop ultralytics ultralytics-thop boto3 botocore s3transfer jmespath roboflow python-dotenv filetype \
  requests-toolbelt pillow-avif-plugin "setuptools<81" 2>&1 | grep -v "is ignored" || true
for whl in "$bundle"/wheels/*.whl; do
  case "$(basename "$whl")" in
    botocore-*) continue ;;
    *-cp312-*) .venv/bin/python -m zipfile -e "$whl" "$bundle/cp312" ;;
    *) .venv/bin/python -m zipfile -e "$whl" "$bundle/site" ;;
  esac
  rm "$whl"
done
rm -rf "$bundle/site/tests"  # a stray top-level package some wheel ships
du -sh "$bundle"
echo "gpu bundle ready: carry .gpu-bundle (and run python scripts/gpu_check.py there)"
