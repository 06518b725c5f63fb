#!/usr/bin/env python3
"""Rewrites a src/kernels/cuda/*.cu file as C++ for the emulator (emu.h): each <<<...>>> launch
becomes an emu::launch call that names its kernel, and dynamic shared memory a pointer to the
emulator's buffer of the running block.
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
    src = '#include "emu.h"\n#line 1 "%s"\n' % src_path + src.replace('#include <cuda_runtime.h>', '', 1)
    src = re.sub(r'extern __shared__ (\w+) (\w+)\[\];', r'\1* \2 = emu::dynamic_smem<\1>();', src)

    def launch(m):
        kernel, config, call_args = m.group(1), ' '.join(m.group(2).split()), m.group(3)
        # One line, then the newlines the launch spanned, so that #line keeps the .cu file's numbers.
        call = 'emu::launch("%s", %s, %s, %s);' % (kernel.split('<')[0], config, kernel, ' '.join(call_args.split()))
        return call + '\n' * m.group(0).count('\n')

    src = re.sub(r'([A-Za-z_][\w:]*(?:<[^;<>]*>)?)\s*<<<(.*?)>>>\((.*?)\);', launch, src, flags=re.S)
    if '<<<' in src:
        sys.exit(f'{src_path}: a launch the rewrite did not recognize')
    if chunk is not None:
        src, n = re.subn(r'constexpr int64_t kLogitsBytes = [^;]*;', f'constexpr int64_t kLogitsBytes = {chunk};', src)
        if 'lmhead_ce' in src_path and n != 1:
            sys.exit(f'{src_path}: kLogitsBytes not found')
    open(out_path, 'w').write(src)


main()
