import SessionFuzzChecks

@_cdecl("LLVMFuzzerInitialize")
public func initialize(_ argc: UnsafeMutablePointer<CInt>, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>) -> CInt {
    SessionFuzzChecks.prepareChannelEndpointChecks()
    return 0
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    SessionFuzzChecks.checkChannelEndpoint(UnsafeRawBufferPointer(start: data, count: size))
    return 0
}
