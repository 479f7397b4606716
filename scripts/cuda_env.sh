# Sourced by the GPU scripts: make the CUDA libraries cudarc dlopens findable.
# cudarc looks for libnvrtc.so / libcublas.so / libcublasLt.so / libnccl.so (unversioned or .so.12;
# NCCL installs libnccl.so.2, which cudarc never tries); CUDA 13
# installs .so.13: link whatever exists under the names cudarc looks for. Needs $OUT.
L=/tmp/lserve-cudalibs; mkdir -p $L
for n in nvrtc cublas cublasLt nccl; do
  f=$( (ls /usr/local/cuda/lib64/lib$n.so* /usr/local/cuda/targets/*/lib/lib$n.so* 2>/dev/null;
        ldconfig -p | awk -v n="lib$n.so" 'index($1, n) == 1 {print $NF}';
        find / -xdev -name "lib$n.so*" -path '*nvidia*' 2>/dev/null) | grep -v builtins | head -1)
  [ -n "$f" ] && ln -sf "$f" $L/lib$n.so && echo "$n -> $f" >> "${OUT:-/tmp}/cudalibs.txt" && export LD_LIBRARY_PATH="$L:$(dirname "$f"):${LD_LIBRARY_PATH:-}"
done
export LSERVE_CACHE=${LSERVE_CACHE:-/tmp/lserve-cache}
