// The layer check's executable: linked with the whole of one layer's library and only the libraries
// that layer declares (CMakeLists.txt, llamatrain_layer), so a call into a layer it may not use is an
// undefined symbol at link time. It runs nothing.
int main() { return 0; }
