# Sourced on a machine without a package registry, from a bundle folder scripts/device_bundle.sh made
# (where it is copied as env.sh): unpacks the folder's deps.tar.xz once into $LLAMATRAIN_DEPS
# (default /tmp/llamatrain-deps) and points the build and the programs at it: CMake, pkg-config (the
# bundle's .pc files only), the loader, and Open MPI (relocated with OPAL_PREFIX; mpirun on PATH).
# Usage: source .devdeps/env.sh        (then cmake ... $LLAMATRAIN_DEPS_CMAKE_ARGS)
_llt_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
LLAMATRAIN_DEPS=${LLAMATRAIN_DEPS:-/tmp/llamatrain-deps}
_llt_stamp=$LLAMATRAIN_DEPS/.unpacked-$(stat -c %s-%Y "$_llt_dir/deps.tar.xz")
if [ ! -f "$_llt_stamp" ]; then
  rm -rf "$LLAMATRAIN_DEPS"
  mkdir -p "$LLAMATRAIN_DEPS"
  tar -C "$LLAMATRAIN_DEPS" -xJf "$_llt_dir/deps.tar.xz" && touch "$_llt_stamp"
fi
_llt_lib=$LLAMATRAIN_DEPS/usr/lib/x86_64-linux-gnu
export LLAMATRAIN_DEPS
export LLAMATRAIN_DEPS_SAVED_LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}
export PATH=$LLAMATRAIN_DEPS/usr/bin:$PATH
export LD_LIBRARY_PATH=$_llt_lib:$_llt_lib/openmpi/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export CMAKE_PREFIX_PATH=$LLAMATRAIN_DEPS/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}
export PKG_CONFIG_LIBDIR=$_llt_lib/pkgconfig:$LLAMATRAIN_DEPS/usr/share/pkgconfig
export PKG_CONFIG_SYSROOT_DIR=$LLAMATRAIN_DEPS
export OPAL_PREFIX=$LLAMATRAIN_DEPS/usr
# (mpirun wants a remote shell even for a job on this machine alone: where there is none, it is told
# that remote nodes cannot be reached)
command -v ssh >/dev/null || command -v rsh >/dev/null || export OMPI_MCA_plm_rsh_agent=${OMPI_MCA_plm_rsh_agent:-false}
# Open MPI's wrapper compiler for CMake's FindMPI (it reads its flags, relocated by OPAL_PREFIX), and
# the loader path baked into what the build links (its tests run without this shell's environment
# too).
export LLAMATRAIN_DEPS_CMAKE_ARGS="-DMPI_C_COMPILER=$LLAMATRAIN_DEPS/usr/bin/mpicc -DCMAKE_BUILD_RPATH=$_llt_lib;$_llt_lib/openmpi/lib"
unset _llt_dir _llt_stamp _llt_lib
