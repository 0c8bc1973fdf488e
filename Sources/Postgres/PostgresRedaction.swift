import Foundation
internal import CLibPQ

/// Removes passwords of a connection string from text destined for errors or logs, and nothing else.
///
/// Which options are secret is libpq's own word: every option its `PQconninfoOption` table marks with `dispchar`
/// `*` (`password`, `sslpassword`). The values are found two ways, and both are masked wherever they occur:
/// - libpq's parse of the string (`PQconninfoParse`, libpq docs §34.1.1 "Connection Strings", both the
///   `key=value` and the `postgresql://user:password@host/db?password=...` forms), so whatever characters a
///   password holds (`#`, spaces, quotes, `@`, `%23`) the value libpq will use is masked;
/// - the string as written (``spelledSecrets(in:)``): a password quoted or escaped in `key=value` form, a URI's
///   percent-encoded user-info password and `?password=` value, before libpq decodes them. This scan follows
///   libpq's grammar without ever failing, so it also finds the passwords of a string libpq refuses to parse,
///   whose error quotes the token it stopped at (`missing "=" after "S3cret" in connection info string`,
///   `invalid percent-encoded token: "se%2#cret"`, `... in URI: "postgresql://u:pw@[::1/db"`): only the
///   password inside such a message is masked, the rest of libpq's message stays readable.
enum PostgresRedaction {
    static let mask = "********"

    /// libpq's parse of `connectionString`: `.success` with every secret (possibly none), longest first, or
    /// `.failure` with libpq's parse error, the secrets in it masked. A string that is neither a URI nor
    /// `key=value` is a plain database name for libpq (`PQconnectdbParams` with `expand_dbname`) and holds no
    /// secret.
    static func parse(_ connectionString: String) -> Result<[String], RedactedParseError> {
        guard isConnectionString(connectionString) else { return .success([]) }
        let spelled = spelledSecrets(in: connectionString)
        var errorMessage: UnsafeMutablePointer<CChar>?
        guard let options = PQconninfoParse(connectionString, &errorMessage) else {
            let message = errorMessage.map { String(cString: $0) } ?? "out of memory"
            if let errorMessage { PQfreemem(errorMessage) }
            return .failure(RedactedParseError(message: redact(message, secrets: longestFirst(spelled))))
        }
        defer { PQconninfoFree(options) }
        var found = spelled
        var cursor = options
        while let keyword = cursor.pointee.keyword {
            if secretKeywords.contains(String(cString: keyword)), let value = cursor.pointee.val {
                found.append(String(cString: value))
            }
            cursor += 1
        }
        return .success(longestFirst(found))
    }

    /// Every password of `connectionString` (see ``parse(_:)``), also when libpq cannot parse it.
    static func secrets(in connectionString: String) -> [String] {
        switch parse(connectionString) {
        case .success(let secrets): return secrets
        case .failure: return longestFirst(spelledSecrets(in: connectionString))
        }
    }

    /// `text` with every password of `connectionString` masked.
    static func redact(_ text: String, connectionString: String) -> String {
        redact(text, secrets: secrets(in: connectionString))
    }

    /// `text` with every one of `secrets` (longest first, as ``parse(_:)`` returns them) masked.
    static func redact(_ text: String, secrets: [String]) -> String {
        var result = text
        for secret in secrets { result = result.replacingOccurrences(of: secret, with: mask) }
        return result
    }

    /// libpq's test for an expandable `dbname` (`recognized_connection_string`): a URI prefix or an `=`.
    static func isConnectionString(_ text: String) -> Bool {
        uriPrefix(of: text) != nil || text.contains("=")
    }

    /// The options libpq marks secret (`dispchar` `*` in its `PQconninfoOption` table) and every option it knows,
    /// read once from libpq's parse of an empty string.
    private static let (secretKeywords, knownKeywords): (Set<String>, Set<String>) = {
        var secret: Set<String> = []
        var known: Set<String> = []
        var errorMessage: UnsafeMutablePointer<CChar>?
        guard let options = PQconninfoParse("", &errorMessage) else {
            if let errorMessage { PQfreemem(errorMessage) }
            return (["password", "sslpassword"], [])
        }
        defer { PQconninfoFree(options) }
        var cursor = options
        while let keyword = cursor.pointee.keyword {
            let name = String(cString: keyword)
            known.insert(name)
            if let dispchar = cursor.pointee.dispchar, dispchar.pointee == CChar(UInt8(ascii: "*")) { secret.insert(name) }
            cursor += 1
        }
        return (secret, known)
    }()

    private static func longestFirst(_ secrets: [String]) -> [String] {
        // Longest first, so a secret containing another is masked whole.
        Set(secrets.filter { !$0.isEmpty }).sorted { $0.count != $1.count ? $0.count > $1.count : $0 < $1 }
    }

    private static func uriPrefix(of text: String) -> String? {
        ["postgresql://", "postgres://"].first(where: { text.hasPrefix($0) })
    }

    /// The secrets of `connectionString` as written and as decoded, by a scan that follows libpq's grammar but never
    /// fails (libpq's `conninfo_parse` and `conninfo_uri_parse_options`). Where the string breaks the grammar right
    /// after a secret, what follows is taken for the rest of that secret until a known option comes: a
    /// `password=Sup3r S3cret` is refused by libpq at `S3cret`, a `?password=a&b` at `b`.
    static func spelledSecrets(in connectionString: String) -> [String] {
        if let prefix = uriPrefix(of: connectionString) {
            return uriSecrets(connectionString.dropFirst(prefix.count))
        }
        return keyValueSecrets(Array(connectionString))
    }

    /// `key = value` pairs separated by white space; a value is bare (up to white space, `\` escaping the next
    /// character) or single-quoted (`\` escaping); an unterminated quote runs to the end.
    private static func keyValueSecrets(_ characters: [Character]) -> [String] {
        var found: [String] = []
        var index = 0
        var inSecret = false
        func skipSpaces() { while index < characters.count, characters[index].isWhitespace { index += 1 } }
        while true {
            skipSpaces()
            guard index < characters.count else { break }
            let nameStart = index
            while index < characters.count, characters[index] != "=", !characters[index].isWhitespace { index += 1 }
            let name = String(characters[nameStart..<index])
            skipSpaces()
            guard index < characters.count, characters[index] == "=" else {
                // No `=`: libpq stops here ("missing "=" after ..."); after a secret it is the secret's rest.
                if inSecret { found.append(name) }
                continue
            }
            index += 1
            skipSpaces()
            let valueStart = index
            var decoded = ""
            if index < characters.count, characters[index] == "'" {
                index += 1
                while index < characters.count, characters[index] != "'" {
                    if characters[index] == "\\", index + 1 < characters.count { index += 1 }
                    decoded.append(characters[index])
                    index += 1
                }
                found += inSecretValue(name, &inSecret) ? [decoded, String(characters[(valueStart + 1)..<index])] : []
                if index < characters.count { index += 1 }
            } else {
                while index < characters.count, !characters[index].isWhitespace {
                    if characters[index] == "\\", index + 1 < characters.count { index += 1 }
                    decoded.append(characters[index])
                    index += 1
                }
                found += inSecretValue(name, &inSecret) ? [decoded, String(characters[valueStart..<index])] : []
            }
            if inSecret && !secretKeywords.contains(name) { found.append(name) }
        }
        return found
    }

    /// Whether the value of option `name` is (part of) a secret: a secret option's, or, right after a secret, an
    /// option libpq does not know (the rest of a secret that held the separator). Updates `inSecret`.
    private static func inSecretValue(_ name: String, _ inSecret: inout Bool) -> Bool {
        if secretKeywords.contains(name) {
            inSecret = true
        } else if inSecret && knownKeywords.contains(name) {
            inSecret = false
        }
        return inSecret
    }

    /// A URI after its scheme: the user-info password (libpq: the user info ends at the first `@` before any `/`,
    /// the password follows its first `:`), and the values of `?keyword=value` parameters whose keyword (decoded)
    /// is a secret option.
    ///
    /// A password holding an unencoded `/` or `@` is cut elsewhere by libpq, which then reads its pieces as a
    /// host, a port or a database name and may quote them in a later error (`invalid integer value "pa" for
    /// connection option "port"`): so the user info is also taken up to the last `@` before the query, and that
    /// password's pieces between those characters are secrets too.
    private static func uriSecrets(_ rest: Substring) -> [String] {
        var found: [String] = []
        func password(ofUserInfo userInfo: Substring) -> String? {
            userInfo.firstIndex(of: ":").map { String(userInfo[userInfo.index(after: $0)...]) }
        }
        func add(_ spelled: String) {
            found.append(spelled)
            if let decoded = spelled.removingPercentEncoding { found.append(decoded) }
        }
        if let stop = rest.firstIndex(where: { $0 == "@" || $0 == "/" }), rest[stop] == "@",
            let spelled = password(ofUserInfo: rest[..<stop])
        {
            add(spelled)
        }
        let beforeQuery = rest[..<(rest.firstIndex(of: "?") ?? rest.endIndex)]
        if let lastAt = beforeQuery.lastIndex(of: "@"), let intended = password(ofUserInfo: beforeQuery[..<lastAt]) {
            add(intended)
            for piece in intended.split(whereSeparator: { $0 == "/" || $0 == "@" }) where piece.count >= 2 {
                add(String(piece))
            }
        }
        guard let question = rest.firstIndex(of: "?") else { return found }
        var inSecret = false
        for parameter in rest[rest.index(after: question)...].split(separator: "&") {
            guard let equals = parameter.firstIndex(of: "=") else {
                // No `=`: libpq stops here; after a secret it is the secret's rest (an unencoded `&` in it).
                if inSecret { add(String(parameter)) }
                continue
            }
            let spelledName = String(parameter[..<equals])
            let name = spelledName.removingPercentEncoding ?? spelledName
            if inSecretValue(name, &inSecret) {
                add(String(parameter[parameter.index(after: equals)...]))
                if !secretKeywords.contains(name) { add(spelledName) }
            }
        }
        return found
    }
}

/// A connection string libpq could not parse; `message` is libpq's, the passwords in it masked.
struct RedactedParseError: Error {
    var message: String
}
