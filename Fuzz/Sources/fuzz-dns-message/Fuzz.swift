import DNSFuzzChecks

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    DNSFuzzChecks.checkMessage(UnsafeRawBufferPointer(start: data, count: size))
    return 0
}
