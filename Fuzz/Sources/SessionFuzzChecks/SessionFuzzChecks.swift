/// The properties the session fuzz targets check, shared by the libFuzzer targets and by the
/// corpus replay tests. A violated property traps, which is what libFuzzer records as a crash.
/// Inputs are scripts: a few setup bytes, then operations, so the fuzzer explores sequences of
/// events and not only the decoders. Every input is a valid script.
public enum SessionFuzzChecks {}
