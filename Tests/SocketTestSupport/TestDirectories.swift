import Foundation

/// The test process's own directory for every ``temporaryDirectory(_:)``, removed when the process exits: the
/// tests write certificate authorities and private keys there, which no run should leave behind in /tmp.
public let testProcessDirectory: String = {
    let path = FileManager.default.temporaryDirectory.appendingPathComponent("pushizo-socket-tests-\(getpid())").path
    try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    atexit { try? FileManager.default.removeItem(atPath: testProcessDirectory) }
    return path
}()

/// A fresh directory inside ``testProcessDirectory``.
public func temporaryDirectory(_ label: String) -> String {
    let path = (testProcessDirectory as NSString).appendingPathComponent("\(label)-\(UUID().uuidString)")
    try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    return path
}
