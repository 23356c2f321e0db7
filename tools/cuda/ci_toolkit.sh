# Source this (bash) on a CPU-only machine to compile and link the `cuda` features: installs the
# CUDA 13 compiler from PyPI into a virtual environment, puts link-only stand-ins for the driver
# and the CUDA libraries where cudarc's build script searches, and exports what the build needs.
# GPU machines use their real toolkit instead (README, "Building for a GPU").
#
#   source tools/cuda/ci_toolkit.sh [VENV_DIR]     (default: .cuda-venv in the workspace)

# CUDA 13.0: the H200 machines' driver (580, CUDA 13.0) loads PTX of 13.0 and older only, so the
# binaries built here run there. cudarc 0.19 knows CUDA versions up to 13.4. Every part is pinned:
# the meta package leaves nvvm, crt and the runtime free, and a newer nvvm writes PTX (9.5 for
# 13.5) that the pinned ptxas refuses ("Unsupported .version").
MOTIONVL_CUDA_TOOLKIT="cuda-toolkit[nvcc,cccl]==13.0.2 nvidia-cuda-nvcc==13.0.88 nvidia-nvvm==13.0.88 nvidia-cuda-crt==13.0.88 nvidia-cuda-runtime==13.0.96 nvidia-cuda-cccl==13.0.85"
_ws="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
_venv="${1:-$_ws/.cuda-venv}"

if [ ! -x "$_venv/bin/nvcc-installed" ]; then
  python3 -m venv "$_venv"
  # shellcheck disable=SC2086 # one requirement per word
  "$_venv/bin/pip" install --quiet --disable-pip-version-check $MOTIONVL_CUDA_TOOLKIT
  touch "$_venv/bin/nvcc-installed" && chmod +x "$_venv/bin/nvcc-installed"
fi
_root="$("$_venv/bin/python" -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], "cu13"))')"

# cudarc adds $CUDA_HOME/lib/stubs to the link search path. The runtime is the real one from PyPI
# (candle-kernels' static MoE library needs its `__cudaRegister*`), under the unversioned name.
(cd "$_ws" && python3 tools/cuda/link_stubs.py "$_root/lib/stubs") > /dev/null
ln -sf libcudart.so.13 "$_root/lib/libcudart.so"

export PATH="$_root/bin:$PATH"   # cudarc's build script reads the version from `nvcc --version`
export CUDA_HOME="$_root"        # cudaforge finds nvcc and the headers here, cudarc the -L paths
export CUDARC_CUDA_VERSION=13000 # cudarc's bindings for the driver API of CUDA 13.0
# No GPU to ask: sm_90 (H100/H200). Override for another card before sourcing.
export CUDA_COMPUTE_CAP="${CUDA_COMPUTE_CAP:-90}"
export CUDAFORGE_THREADS="${CUDAFORGE_THREADS:-$(nproc)}"
unset _ws _venv _root
