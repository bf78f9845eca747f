// Apple's MultipeerConnectivity brings Foundation with it: app files that import only it use
// NSObject, Data, JSONEncoder and DispatchQueue. The same file must compile here.
@_exported import Dispatch
@_exported import Foundation
