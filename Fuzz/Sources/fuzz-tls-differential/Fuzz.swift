import SessionFuzzChecks

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    SessionFuzzChecks.checkTLSDifferential(UnsafeRawBufferPointer(start: data, count: size))
    return 0
}
