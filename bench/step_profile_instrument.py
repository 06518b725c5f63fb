# Rewrites src/model/llama.cpp (path in argv[1]) in place so that every `cpu::kernel(...);` line of the
# training step, the grad norm, AdamW and zero_grad run inside a scoped timer named after the kernel
# and its step comment; the totals print to stderr at exit. Used by bench/step_profile.sh only: the
# model itself carries no timers.
import re, sys
p=sys.argv[1]
s=open(p).read()
hdr='''#include <chrono>
#include <map>
#include <cstdio>
namespace { struct Prof { std::map<std::string,double> t; ~Prof(){ double tot=0; for(auto&[k,v]:t) tot+=v; for(auto&[k,v]:t) std::fprintf(stderr,"%-34s %8.3f s %5.1f%%\\n",k.c_str(),v,100*v/tot);} } g_prof;
struct Tm { const char* n; std::chrono::steady_clock::time_point s=std::chrono::steady_clock::now(); ~Tm(){ g_prof.t[n]+=std::chrono::duration<double>(std::chrono::steady_clock::now()-s).count(); } }; }
#define TM(name, ...) do { Tm tm_{name}; __VA_ARGS__; } while(0)
'''
s=s.replace('namespace llamatrain::model {', hdr+'namespace llamatrain::model {',1)
# join multi-line cpu:: calls
lines=s.split('\n'); out=[]; i=0
while i<len(lines):
    line=lines[i]
    if re.match(r'^\s*cpu::\w+\(', line) and not line.rstrip().endswith(';') and '//' not in line:
        while not lines[i].split('//')[0].rstrip().endswith(';'):
            i+=1; line=line.rstrip()+' '+lines[i].strip()
    m=re.match(r'^(\s*)(cpu::(\w+)\((.*)\);)(\s*//\s*(.*))?$', line)
    if m and 'decode' not in ''.join(out[-200:]):
        name=m.group(3)+':'+(m.group(6) or '').strip()
        line=f'{m.group(1)}TM("{name}", {m.group(2)[:-1]});'
    out.append(line); i+=1
s='\n'.join(out)
s=s.replace('  const double norm = std::sqrt(cpu::sum_squares(grad_arena_.data(), num_params_));','  double norm; TM("sumsq", norm = std::sqrt(cpu::sum_squares(grad_arena_.data(), num_params_)));')
s=s.replace('void LlamaModel::zero_grad() { std::fill(grad_arena_.begin(), grad_arena_.end(), 0.0f); }','void LlamaModel::zero_grad() { TM("zero_grad", std::fill(grad_arena_.begin(), grad_arena_.end(), 0.0f)); }')
if s.count('TM("') < 20:
    sys.exit(f"step_profile_instrument: only {s.count('TM(')} kernel lines found in {p}; update the patterns")
open(p, 'w').write(s)
