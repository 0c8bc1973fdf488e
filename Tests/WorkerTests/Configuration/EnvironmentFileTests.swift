import Foundation
import Testing
@testable import Worker

/// ``EnvironmentFile`` against the rules of systemd.exec(5), "EnvironmentFile=", one example per rule. Every
/// expected value here was also read by systemd 252's own parser of this format (the environment.d generator,
/// `systemd-environment-d-generator`, which shares it and only adds `$` expansion, used by no example here).
@Suite("EnvironmentFile= files")
struct EnvironmentFileTests {
    static func variables(_ text: String) -> [String: String] {
        EnvironmentFile(parsing: text).variables
    }

    @Test(arguments: [
        // "newline-separated variable assignments"; a value with & and spaces inside stays whole.
        ("A=plain & value\n", "A", "plain & value"),
        ("A=postgresql://u:p@h/db?sslmode=require&connect_timeout=5", "A", "postgresql://u:p@h/db?sslmode=require&connect_timeout=5"),
        // "Leading and trailing whitespace (space, tab, carriage return) is discarded, but interior whitespace within
        // the line is preserved verbatim"; white space around the key and the = goes too.
        ("O=a b  c  \n", "O", "a b  c"),
        ("  Q = spaced key \n", "Q", "spaced key"),
        ("I=\t trailing \t\n", "I", "trailing"),
        ("M=v\r\n", "M", "v"),
        // "quotes after the first non-whitespace character are preserved"
        ("U=a \"b\" 'c'\n", "U", "a \"b\" 'c'"),
        // Unquoted: "A backslash followed by any character other than newline will preserve the following character,
        // so that \\ will become the value \"; an escaped trailing space is kept.
        ("K=a\\ b\n", "K", "a b"),
        ("S=\\\\\n", "S", "\\"),
        ("L=x\\ \n", "L", "x "),
        ("V=\\\"q\\\"\n", "V", "\"q\""),
        // "A line ending with a backslash will be continued to the following one, with the newline itself discarded."
        ("E=one\\\ntwo\n", "E", "onetwo"),
        // Single quotes: "can span multiple lines and contain any character verbatim other than single quote ...
        // No backslash-escape sequences are recognized."
        ("G='single \\ q'\n", "G", "single \\ q"),
        ("G='two\nlines'\n", "G", "two\nlines"),
        // Double quotes: "Backslash followed by any of "\`$ will preserve that character. A backslash followed by
        // newline is a line continuation ... A backslash followed by any other character is ignored; both the
        // backslash and the following character are preserved verbatim."
        ("B=\"dq \\\"x\\\" \\` \\$y \\\\ \\n\"\n", "B", "dq \"x\" ` $y \\ \\n"),
        ("N=\"x\\\ny\"\n", "N", "xy"),
        ("H=\"multi\nline\"\n", "H", "multi\nline"),
        // "Leading and trailing whitespace outside of the quotes is discarded"; parts next to each other join.
        ("J=  \"a\"b\n", "J", "ab"),
        ("R=\"a\" 'b' c\n", "R", "abc"),
        ("W= ' padded ' \n", "W", " padded "),
        // No $ expansion: "$" is a character like any other.
        ("D=$HOME/x\n", "D", "$HOME/x"),
        // An unterminated quote runs to the end of the file.
        ("P='unterminated\nT=x", "P", "unterminated\nT=x"),
        // The last line needs no newline; an empty value is a value.
        ("T=x", "T", "x"),
        ("Z=\n", "Z", ""),
        // "If the same variable is set twice ... the later setting will override the earlier setting."
        ("X=1\nX=2\n", "X", "2"),
    ])
    func aValueIsReadAsSystemdReadsIt(text: String, name: String, value: String) {
        #expect(Self.variables(text)[name] == value, "\(text.debugDescription) -> \(Self.variables(text))")
    }

    /// "Empty lines, lines without an "=" separator, or lines starting with ";" or "#" will be ignored"; a comment
    /// is one line, whatever it ends with.
    @Test func commentsEmptyLinesAndLinesWithoutAnEqualsSignAreIgnored() {
        let text = "# C=comment\n;D=comment\n   # E=indented comment\n\nno separator here\n#F=x \\\nG=after\n"
        #expect(Self.variables(text) == ["G": "after"])
    }

    /// systemd does not strip `export`: `export F=1` names the variable `export F`, which is not a name, so the
    /// line is ignored (and listed), as is a name starting with a digit.
    @Test func exportIsNotStripped() {
        let file = EnvironmentFile(parsing: "A=1\nexport F=1\n9X=2\nB_2=3\n")
        #expect(file.variables == ["A": "1", "B_2": "3"])
        #expect(file.ignored.map(\.name) == ["export F", "9X"])
        #expect(file.ignored.map(\.line) == [2, 3])
    }

    /// Each assignment knows the line its key is on, counting the lines a value spans.
    @Test func linesAreCounted() {
        let file = EnvironmentFile(parsing: "A='x\ny'\n# note\nB=1\\\n2\nC=3\n")
        #expect(file.assignments.map(\.line) == [1, 4, 6])
        #expect(file.variables == ["A": "x\ny", "B": "12", "C": "3"])
    }

    /// The example environment file the units read parses to what `run` expects.
    @Test func theExampleFileParses() throws {
        let path = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("config/pushizo-worker.env.example").path
        let file = try EnvironmentFile(path: path)
        #expect(file.ignored.isEmpty)
        #expect(file.variables["PUSHIZO_DATABASE_URL"]?.isEmpty == false)
    }

    @Test func aMissingFileIsNamed() {
        #expect {
            _ = try EnvironmentFile(path: "/nonexistent/pushizo.env")
        } throws: { error in
            "\(error)".contains("/nonexistent/pushizo.env") && "\(error)".contains("cannot be read")
        }
    }
}
