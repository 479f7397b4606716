"""Copies named files out of the PyPI wheels in a folder: `wheel_extract.py DIR NAME:SUBDIR ...`
writes every member of DIR/wheels/*.whl whose file name is NAME to DIR/SUBDIR/NAME, executable.
Used by scripts/cuda_tools.sh (NVRTC, ptxas) and scripts/cuda_sass.sh (cuobjdump, nvdisasm)."""
import glob
import os
import sys
import zipfile

d = sys.argv[1]
want = dict(arg.split(":", 1) for arg in sys.argv[2:])
for whl in glob.glob(os.path.join(d, "wheels", "*.whl")):
    with zipfile.ZipFile(whl) as z:
        for name in z.namelist():
            base = os.path.basename(name)
            if base in want:
                out = os.path.join(d, want[base], base)
                with z.open(name) as src, open(out, "wb") as dst:
                    dst.write(src.read())
                os.chmod(out, 0o755)
