# The Debian packages llamatrain needs, in one place: sourced by scripts/setup.sh (which installs
# them) and scripts/device_bundle.sh (which carries the libraries to a machine without a package
# registry). Bash arrays; nothing runs here.

# The libraries the program is built against and runs with (and the MPI launcher): what a machine
# that has a C++ compiler, CMake and ninja still lacks.
LIBRARY_PACKAGES=(
  libdnnl-dev                                  # matmuls (AMX / AVX512-BF16 / AVX2)
  libsentencepiece-dev                         # Llama 2 tokenizer, and the trainer of `llamatrain tokenizer train`
  libpcre2-dev                                 # tokenizer.json pre-tokenizer regexes (Unicode classes, lookahead, JIT)
  libicu-dev                                   # tokenizer.json NFC/NFKC normalizers (ICU Normalizer2: Qwen2.5 normalizes to NFC)
  libsimdjson-dev nlohmann-json3-dev libyaml-cpp-dev libcli11-dev libfmt-dev
  zlib1g-dev libzstd-dev
  libgtest-dev libgmock-dev                    # the configure step finds them (the tests' framework)
  libopenmpi-dev openmpi-bin                   # MPI: the parallel runtime's communicator, mpirun
)
# What the program needs to build and run, and the demo's text: all that `SETUP_TARGET=llamatrain`
# (the README's main command) installs.
PROGRAM_PACKAGES=(
  build-essential cmake ninja-build pkg-config git
  "${LIBRARY_PACKAGES[@]}"
  fortunes fortunes-zh jq   # the demo's English and Chinese text, and its JSONL conversion (scripts/demo.sh)
)
# What the tests and benches need besides (scripts/test.sh).
TEST_PACKAGES=(
  sentencepiece         # spm_train / spm_encode: the tests' independent tokenizer fixtures
  libbenchmark-dev      # the micro-benchmarks under bench/
  libpmix-dev           # srun --mpi=pmix starts OpenMPI ranks under SLURM (the PMIx library it loads)
  slurmctld slurmd slurm-client munge   # a real SLURM cluster on this machine for the slurm tests
  python3-torch python3-numpy python3-sentencepiece   # PyTorch reference
  python3-protobuf      # decodes our TensorBoard event files and SentencePiece models in tests
  python3-jinja2        # Python's Jinja, as transformers renders chat templates: the chat-template reference
  libopenblas0-openmp   # a real BLAS for that reference (the default libblas3 is ~15x slower)
  chromium fonts-dejavu-core   # renders `llamatrain report`'s page headless in its browser test
  qemu-user             # runs the binary on CPU models without AVX-512 and without AVX2
  libboost-context-dev  # the CUDA emulation's threads (fibers): the CUDA backend's tests without a GPU
  nodejs                # runs the JavaScript references (Hugging Face tokenizers and Jinja, tiktoken)
  ca-certificates       # npm fetches those references from its registry over TLS
  clang-format universal-ctags   # the code checks: sources as .clang-format writes them, no function over 100 lines
)
