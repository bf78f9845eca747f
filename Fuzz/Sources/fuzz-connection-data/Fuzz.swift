import WireFuzzChecks

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    WireFuzzChecks.checkConnectionData(UnsafeRawBufferPointer(start: data, count: size))
    return 0
}
