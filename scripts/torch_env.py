"""What the PyTorch anchor scripts (torch_decode_bench.py, torch_prefill_bench.py) share about
their environment.

Our GPU scripts source scripts/cuda_env.sh, which puts /usr/local/cuda/lib64 (cuDNN 9.14 on the
GPU machine) on LD_LIBRARY_PATH for cudarc; torch 2.11 bundles cuDNN 9.19 and, finding the older
one first, runs without cuDNN: no cuDNN attention, so SDPA fell back to flash attention at half
the speed (the anchor of docs/benchmarks.md sessions 11-24). Torch brings its own libraries, so
`outside_cuda_env()` (called before `import torch`) starts the script again without that path.
"""
import os
import sys


def outside_cuda_env():
    if os.environ.get("LD_LIBRARY_PATH") and os.environ.get("LSERVE_TORCH_KEEP_LD_PATH") != "1":
        env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
        env["LSERVE_TORCH_KEEP_LD_PATH"] = "1"
        os.execve(sys.executable, [sys.executable] + sys.argv, env)


def print_versions():
    """torch, CUDA and cuDNN versions and the device, one line (the anchor's provenance)."""
    import torch
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, cuDNN {cudnn}, {torch.cuda.get_device_name()}")
