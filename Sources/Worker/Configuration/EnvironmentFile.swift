import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A file of variable assignments read as systemd reads a unit's `EnvironmentFile=` (systemd.exec(5),
/// "EnvironmentFile="; the parser is systemd's `parse_env_file_internal`, whose states this one follows), so
/// `--env-file /etc/pushizo-worker/pushizo-worker.env` gives a command exactly the variables the unit's process gets:
///
/// - one `KEY=VALUE` assignment per line; white space around the key and around the `=` is dropped; empty lines,
///   lines without `=` and lines whose first non-blank character is `#` or `;` are ignored (a comment is one line:
///   a backslash at its end continues nothing, as in systemd 254 and later);
/// - an unquoted value keeps its inner white space and any quotes after its first character, drops leading and
///   trailing white space (space, tab, carriage return); a backslash keeps the next character as it is (`\\` is one
///   backslash) and a backslash at the end of a line continues the value on the next line, the newline dropped;
/// - a `'`-quoted value is verbatim up to the next `'`, newlines included, no escapes;
/// - a `"`-quoted value may span lines; a backslash keeps a following `"`, `\`, `` ` `` or `$` alone, drops a
///   following newline (a continuation), and is kept with any other character (`"\n"` is backslash, n);
/// - quoted and unquoted parts that follow each other make one value (`KEY="a"'b'` is `ab`); an unterminated quote
///   runs to the end of the file;
/// - a key that is not a variable name (`[A-Za-z_][A-Za-z0-9_]*`) is ignored, as systemd does with a warning:
///   `export KEY=value` is such a line, since systemd does not strip `export`. ``ignored`` lists them.
///
/// Later assignments of a key win. No `$` expansion: `$` is an ordinary character.
public struct EnvironmentFile: Sendable, Equatable {
    /// One assignment, in file order.
    public struct Assignment: Sendable, Equatable {
        public var name: String
        public var value: String
        /// The line the key starts on, from 1.
        public var line: Int
    }

    /// The assignments with a valid name, in file order (a key may appear more than once; the last wins).
    public var assignments: [Assignment]
    /// Assignments dropped because their key is not a variable name (e.g. `export KEY`), in file order.
    public var ignored: [Assignment]

    /// The variables the file sets: each key's last value.
    public var variables: [String: String] {
        Dictionary(assignments.map { ($0.name, $0.value) }, uniquingKeysWith: { _, last in last })
    }

    /// Parses `text` (the file's contents).
    public init(parsing text: String) {
        var parser = Parser()
        for scalar in text.unicodeScalars { parser.consume(scalar) }
        parser.finish()
        assignments = parser.assignments.filter { Self.isVariableName($0.name) }
        ignored = parser.assignments.filter { !Self.isVariableName($0.name) }
    }

    /// Reads and parses the file at `path`.
    /// - Throws: ``EnvironmentFileError`` when it cannot be read or is not UTF-8 (systemd refuses such a file too).
    public init(path: String) throws(EnvironmentFileError) {
        // open(2) for its errno: "No such file or directory", "Permission denied", "Is a directory" name the cause.
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else {
            throw EnvironmentFileError(path: path, problem: "cannot be read: \(String(cString: strerror(errno)))")
        }
        let handle = FileHandle(fileDescriptor: descriptor, closeOnDealloc: true)
        let data: Data
        do {
            data = try handle.readToEnd() ?? Data()
        } catch {
            throw EnvironmentFileError(path: path, problem: "cannot be read: \(error.localizedDescription)")
        }
        guard let text = String(data: data, encoding: .utf8) else {
            throw EnvironmentFileError(path: path, problem: "is not UTF-8 text")
        }
        self.init(parsing: text)
    }

    /// systemd's `env_name_is_valid`: ASCII letters, digits and `_`, not starting with a digit, not empty.
    static func isVariableName(_ name: String) -> Bool {
        guard let first = name.utf8.first, !(UInt8(ascii: "0")...UInt8(ascii: "9")).contains(first) else { return false }
        return name.utf8.allSatisfy { byte in
            byte == UInt8(ascii: "_") || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
                || (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte) || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte)
        }
    }

    /// systemd's states, one character at a time.
    private struct Parser {
        enum State {
            case preKey, key, preValue, value, valueEscape, singleQuoted, doubleQuoted, doubleQuotedEscape, comment
        }

        var state = State.preKey
        var key: [Unicode.Scalar] = []
        var value: [Unicode.Scalar] = []
        /// Where the key's or the unquoted value's trailing white space starts, if it ends in white space.
        var keyWhitespaceStart: Int?
        var valueWhitespaceStart: Int?
        var line = 1
        var keyLine = 1
        var assignments: [Assignment] = []

        static func isNewline(_ c: Unicode.Scalar) -> Bool { c == "\n" || c == "\r" }
        static func isWhitespace(_ c: Unicode.Scalar) -> Bool { c == " " || c == "\t" || isNewline(c) }

        /// Appends `c` to `text`, keeping where its trailing white space starts (dropped when the line ends).
        static func append(_ c: Unicode.Scalar, to text: inout [Unicode.Scalar], trailingWhitespace start: inout Int?) {
            if !isWhitespace(c) {
                start = nil
            } else if start == nil {
                start = text.count
            }
            text.append(c)
        }

        mutating func consume(_ c: Unicode.Scalar) {
            defer { if c == "\n" { line += 1 } }
            switch state {
            case .preKey:
                if c == "#" || c == ";" {
                    state = .comment
                } else if !Self.isWhitespace(c) {
                    state = .key
                    key = [c]
                    keyLine = line
                    keyWhitespaceStart = nil
                }
            case .key:
                if Self.isNewline(c) {
                    // A line without `=`: ignored.
                    state = .preKey
                    key = []
                } else if c == "=" {
                    state = .preValue
                    value = []
                    valueWhitespaceStart = nil
                } else {
                    Self.append(c, to: &key, trailingWhitespace: &keyWhitespaceStart)
                }
            case .preValue:
                if Self.isNewline(c) {
                    push(trimValue: false)
                } else if c == "'" {
                    state = .singleQuoted
                } else if c == "\"" {
                    state = .doubleQuoted
                } else if c == "\\" {
                    state = .valueEscape
                } else if !Self.isWhitespace(c) {
                    state = .value
                    value.append(c)
                }
            case .value:
                if Self.isNewline(c) {
                    push(trimValue: true)
                } else if c == "\\" {
                    state = .valueEscape
                    valueWhitespaceStart = nil
                } else {
                    Self.append(c, to: &value, trailingWhitespace: &valueWhitespaceStart)
                }
            case .valueEscape:
                state = .value
                // An escaped newline is dropped whole: the value goes on on the next line.
                if !Self.isNewline(c) { value.append(c) }
            case .singleQuoted:
                if c == "'" {
                    state = .preValue
                } else {
                    value.append(c)
                }
            case .doubleQuoted:
                if c == "\"" {
                    state = .preValue
                } else if c == "\\" {
                    state = .doubleQuotedEscape
                } else {
                    value.append(c)
                }
            case .doubleQuotedEscape:
                state = .doubleQuoted
                if c == "\"" || c == "\\" || c == "`" || c == "$" {
                    value.append(c)
                } else if c != "\n" {
                    // Like a shell: the backslash stays before any other character.
                    value.append("\\")
                    value.append(c)
                }
            case .comment:
                if Self.isNewline(c) { state = .preKey }
            }
        }

        /// The end of the file: an assignment under way is kept (an unterminated quote included).
        mutating func finish() {
            switch state {
            case .preValue, .valueEscape, .singleQuoted, .doubleQuoted, .doubleQuotedEscape: push(trimValue: false)
            case .value: push(trimValue: true)
            case .preKey, .key, .comment: break
            }
        }

        /// Ends an assignment: the key's trailing white space dropped, and the unquoted value's when `trimValue`.
        mutating func push(trimValue: Bool) {
            if let start = keyWhitespaceStart { key.removeSubrange(start...) }
            if trimValue, let start = valueWhitespaceStart { value.removeSubrange(start...) }
            var name = "", text = ""
            name.unicodeScalars.append(contentsOf: key)
            text.unicodeScalars.append(contentsOf: value)
            assignments.append(Assignment(name: name, value: text, line: keyLine))
            state = .preKey
            key = []
            value = []
            keyWhitespaceStart = nil
            valueWhitespaceStart = nil
        }
    }
}

/// An environment file that cannot be used; the command exits 78 (`EX_CONFIG`) naming it.
public struct EnvironmentFileError: Error, CustomStringConvertible, Sendable {
    public var path: String
    public var problem: String

    public var description: String { "environment file \(path) (--env-file) \(problem)" }
}
