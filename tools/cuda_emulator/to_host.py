#!/usr/bin/env python3
"""Rewrites a src/kernels/cuda/*.cu file as C++ for the emulator (emu.h): <<<...>>> launches become
emu::launch calls and dynamic shared memory a pointer to the emulator's buffer.
Usage: to_host.py IN.cu OUT.cpp [--lmhead-chunk-bytes N] (N replaces lmhead_ce.cu's chunk size, so
small tests run through several chunks)."""
import re
import sys


def main():
    args = sys.argv[1:]
    chunk = None
    if '--lmhead-chunk-bytes' in args:
        i = args.index('--lmhead-chunk-bytes')
        chunk = args[i + 1]
        del args[i:i + 2]
    src_path, out_path = args
    src = open(src_path).read()
    src = '#include "emu.h"\n' + src.replace('#include <cuda_runtime.h>', '', 1)
    src = re.sub(r'extern __shared__ float (\w+)\[\];', r'float* \1 = emu::dynamic_smem<float>();', src)
    src = re.sub(r'([A-Za-z_][\w:]*(?:<[^;<>]*>)?)\s*<<<(.*?)>>>\((.*?)\);',
                 lambda m: 'emu::launch(%s, %s, %s);' % (m.group(2), m.group(1), m.group(3)), src, flags=re.S)
    if '<<<' in src:
        sys.exit(f'{src_path}: a launch the rewrite did not recognize')
    if chunk is not None:
        src, n = re.subn(r'constexpr int64_t kLogitsBytes = [^;]*;', f'constexpr int64_t kLogitsBytes = {chunk};', src)
        if 'lmhead_ce' in src_path and n != 1:
            sys.exit(f'{src_path}: kLogitsBytes not found')
    open(out_path, 'w').write(src)


main()
