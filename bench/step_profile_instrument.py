# Rewrites the model's source files (paths in argv[1:], in place: src/model/passes.cpp and
# src/model/llama.cpp) so that every `k_.kernel(...);` line (a call through the model's backend) of the training step, AdamW and the
# init runs inside a scoped timer named after the kernel and its step comment; one table of totals
# prints to stderr at exit (the timers of all files share it). Used by bench/step_profile.sh only: the
# model itself carries no timers.
import re, sys
hdr='''#include <chrono>
#include <map>
#include <cstdio>
#include <string>
namespace llamatrain_profile {
struct Prof { std::map<std::string,double> t; ~Prof(){ double tot=0; for(auto&[k,v]:t) tot+=v; for(auto&[k,v]:t) std::fprintf(stderr,"%-34s %8.3f s %5.1f%%\\n",k.c_str(),v,100*v/tot);} };
inline Prof& prof() { static Prof p; return p; }
struct Tm { const char* n; std::chrono::steady_clock::time_point s=std::chrono::steady_clock::now(); ~Tm(){ prof().t[n]+=std::chrono::duration<double>(std::chrono::steady_clock::now()-s).count(); } };
}
#define TM(name, ...) do { llamatrain_profile::Tm tm_{name}; __VA_ARGS__; } while(0)
'''
total=0
for p in sys.argv[1:]:
    s=open(p).read()
    s=s.replace('namespace llamatrain::model {', hdr+'namespace llamatrain::model {',1)
    # join multi-line k_. calls
    lines=s.split('\n'); out=[]; i=0
    while i<len(lines):
        line=lines[i]
        if re.match(r'^\s*k_\.\w+\(', line) and not line.rstrip().endswith(';') and '//' not in line:
            while not lines[i].split('//')[0].rstrip().endswith(';'):
                i+=1; line=line.rstrip()+' '+lines[i].strip()
        m=re.match(r'^(\s*)(k_\.(\w+)\((.*)\);)(\s*//\s*(.*))?$', line)
        if m:
            name=m.group(3)+':'+(m.group(6) or '').strip()
            line=f'{m.group(1)}TM("{name}", {m.group(2)[:-1]});'
        out.append(line); i+=1
    s='\n'.join(out)
    total+=s.count('TM("')
    open(p, 'w').write(s)
if total < 25:
    sys.exit(f"step_profile_instrument: only {total} kernel lines found in {' '.join(sys.argv[1:])}; update the patterns")
