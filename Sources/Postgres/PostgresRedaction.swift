import Foundation
internal import CLibPQ

/// Removes passwords of a connection string from text destined for errors or logs.
///
/// The passwords are found by libpq's own parser (`PQconninfoParse`, libpq docs §34.1.1 "Connection Strings",
/// both the `key=value` and the `postgresql://user:password@host/db?password=...` forms), so whatever characters
/// a password holds (`#`, spaces, quotes, `@`, `%23`) it is the value libpq will use: every option libpq itself
/// marks as secret (`dispchar` `*`: `password`, `sslpassword`) is masked, as libpq decoded it and as it is
/// spelled in a URI (percent-encoded user info or query value).
///
/// A string libpq cannot parse has no value libpq could tell apart; its parse error quotes the offending
/// token, which may be the password, so every quoted token of such a message is masked
/// (``redactParseError(_:)``).
enum PostgresRedaction {
    static let mask = "********"

    /// libpq's parse of `connectionString`: `.success` with every secret value (possibly none), or `.failure`
    /// with libpq's parse error, its quoted tokens masked. A string that is neither a URI nor `key=value` is a
    /// plain database name for libpq (`PQconnectdbParams` with `expand_dbname`) and holds no secret.
    static func parse(_ connectionString: String) -> Result<[String], RedactedParseError> {
        guard isConnectionString(connectionString) else { return .success([]) }
        var errorMessage: UnsafeMutablePointer<CChar>?
        guard let options = PQconninfoParse(connectionString, &errorMessage) else {
            let message = errorMessage.map { String(cString: $0) } ?? "out of memory"
            if let errorMessage { PQfreemem(errorMessage) }
            return .failure(RedactedParseError(message: redactParseError(message)))
        }
        defer { PQconninfoFree(options) }
        var secretKeywords: Set<String> = []
        var found: [String] = []
        var cursor = options
        while let keyword = cursor.pointee.keyword {
            if let dispchar = cursor.pointee.dispchar, dispchar.pointee == CChar(UInt8(ascii: "*")) {
                secretKeywords.insert(String(cString: keyword))
                if let value = cursor.pointee.val { found.append(String(cString: value)) }
            }
            cursor += 1
        }
        found += uriSpellings(connectionString, secretKeywords: secretKeywords)
        let secrets = Set(found.filter { !$0.isEmpty })
        // Longest first, so a secret containing another is masked whole.
        return .success(secrets.sorted { $0.count != $1.count ? $0.count > $1.count : $0 < $1 })
    }

    /// Every password of `connectionString` (see ``parse(_:)``); empty when it does not parse.
    static func secrets(in connectionString: String) -> [String] {
        (try? parse(connectionString).get()) ?? []
    }

    /// `text` with every password of `connectionString` masked. For a string libpq cannot parse, `text` is
    /// masked as a parse error (``redactParseError(_:)``).
    static func redact(_ text: String, connectionString: String) -> String {
        switch parse(connectionString) {
        case .failure:
            return redactParseError(text)
        case .success(let secrets):
            return redact(text, secrets: secrets)
        }
    }

    /// `text` with every one of `secrets` (longest first, as ``parse(_:)`` returns them) masked.
    static func redact(_ text: String, secrets: [String]) -> String {
        var result = text
        for secret in secrets { result = result.replacingOccurrences(of: secret, with: mask) }
        return result
    }

    /// libpq's connection-string parse errors quote the token they stopped at (`invalid percent-encoded token:
    /// "se%2#cret"`, `missing "=" after "..."`, `... in URI: "postgresql://..."`): every `"..."` is masked.
    static func redactParseError(_ message: String) -> String {
        var result = ""
        var inQuote = false
        for character in message {
            if character == "\"" {
                if !inQuote { result += "\"" + mask }
                if inQuote { result += "\"" }
                inQuote.toggle()
            } else if !inQuote {
                result.append(character)
            }
        }
        return result
    }

    /// libpq's test for an expandable `dbname` (`recognized_connection_string`): a URI prefix or an `=`.
    static func isConnectionString(_ text: String) -> Bool {
        text.hasPrefix("postgresql://") || text.hasPrefix("postgres://") || text.contains("=")
    }

    /// How a URI spells its secrets before libpq decodes them: the user-info password (libpq's rule: the user
    /// info ends at the first `@` before any `/`; the password follows its first `:`) and the values of
    /// `?keyword=value` parameters whose keyword is a secret option.
    static func uriSpellings(_ uri: String, secretKeywords: Set<String>) -> [String] {
        guard let prefix = ["postgresql://", "postgres://"].first(where: { uri.hasPrefix($0) }) else { return [] }
        var found: [String] = []
        let rest = uri.dropFirst(prefix.count)
        if let stop = rest.firstIndex(where: { $0 == "@" || $0 == "/" }), rest[stop] == "@" {
            let userInfo = rest[..<stop]
            if let colon = userInfo.firstIndex(of: ":") {
                let password = String(userInfo[userInfo.index(after: colon)...])
                found.append(password)
                if let decoded = password.removingPercentEncoding { found.append(decoded) }
            }
        }
        if let question = uri.firstIndex(of: "?") {
            for pair in uri[uri.index(after: question)...].split(separator: "&") {
                guard let equals = pair.firstIndex(of: "=") else { continue }
                let keyword = String(pair[..<equals])
                guard secretKeywords.contains(keyword.removingPercentEncoding ?? keyword) else { continue }
                let value = String(pair[pair.index(after: equals)...])
                found.append(value)
                if let decoded = value.removingPercentEncoding { found.append(decoded) }
            }
        }
        return found
    }
}

/// A connection string libpq could not parse; `message` is libpq's, its quoted tokens masked.
struct RedactedParseError: Error {
    var message: String
}
