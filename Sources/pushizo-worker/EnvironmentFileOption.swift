import Foundation
import Worker
#if canImport(Glibc)
import Glibc
#endif

/// `--env-file PATH`, accepted by every command, anywhere on the command line and more than once: the files are
/// read in order as systemd reads a unit's `EnvironmentFile=` (``EnvironmentFile``), and their variables are set in
/// the process environment before anything else runs, so a command sees what the unit's process would.
///
/// Precedence follows systemd, where `EnvironmentFile=` overrides `Environment=`: a file's value wins over the same
/// variable inherited from the shell, a later file's over an earlier one's, and a flag (`--database-url`) over
/// both, as flags win over the environment everywhere.
enum EnvironmentFileOption {
    static let flag = "--env-file"

    /// `arguments` without the option, and the paths it named, in order.
    /// - Throws: ``MissingPath`` for `--env-file` without a path.
    static func extract(_ arguments: [String]) throws -> (arguments: [String], paths: [String]) {
        var rest: [String] = []
        var paths: [String] = []
        var index = 0
        while index < arguments.count {
            let argument = arguments[index]
            if argument == flag {
                guard index + 1 < arguments.count, !arguments[index + 1].isEmpty else {
                    throw MissingPath()
                }
                paths.append(arguments[index + 1])
                index += 2
                continue
            }
            if argument.hasPrefix(flag + "=") {
                let path = String(argument.dropFirst(flag.count + 1))
                guard !path.isEmpty else { throw MissingPath() }
                paths.append(path)
            } else {
                rest.append(argument)
            }
            index += 1
        }
        return (rest, paths)
    }

    struct MissingPath: Error, CustomStringConvertible {
        var description: String { "\(EnvironmentFileOption.flag) needs a path" }
    }

    /// Reads each file and sets its variables in the process environment (`setenv(3)`: libpq, for one, reads
    /// `PGSSLROOTCERT` and its kin there). Call before any other thread starts. Lines systemd ignores for their key
    /// (`export KEY=...`) are ignored too, with a warning on standard error.
    /// - Returns: the process environment afterwards.
    /// - Throws: ``EnvironmentFileError`` for a file that cannot be read.
    static func apply(_ paths: [String], to environment: [String: String]) throws -> [String: String] {
        var merged = environment
        for path in paths {
            let file = try EnvironmentFile(path: path)
            for line in file.ignored {
                FileHandle.standardError.write(Data(
                    "pushizo-worker: \(path) line \(line.line): \"\(TerminalText.sanitized(line.name))\" is not a variable name; ignored, as systemd ignores it\n".utf8))
            }
            for (name, value) in file.variables.sorted(by: { $0.key < $1.key }) {
                setenv(name, value, 1)
                merged[name] = value
            }
        }
        return merged
    }
}
