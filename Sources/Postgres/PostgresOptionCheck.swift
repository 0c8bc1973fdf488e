import Foundation
internal import CLibPQ

/// libpq's own check of a connection string's option *values* (`sslmode=bogus`, `target_session_attrs=nope`,
/// `gssencmode`, `channel_binding`, `load_balance_hosts`, a port that is no number, host and port lists of
/// different lengths), made without contacting any server.
///
/// `PQconninfoParse` only checks the grammar and the option names; the values are checked when a connection
/// starts (`PQconnectStartParams`, before any host is tried: libpq docs §34.1.2 "Parameter Key Words" lists the
/// values each takes). So this starts one with the string and, after it, a `hostaddr` for every host that is no
/// numeric address: libpq either refuses an option value (its message, returned) or gets as far as reading that
/// address, fails to parse it and names it in its message, with no name looked up and no socket opened. The
/// environment's `PG*` defaults take part as in a real connection. Nothing here depends on libpq's wording of
/// an option error, nor on a list of options kept here.
enum PostgresOptionCheck {
    /// The unparsable numeric address libpq is given in place of every host.
    static let probeAddress = "pushizo-option-check"

    /// libpq's refusal of an option value of `connectionString` (passwords masked), or nil when libpq accepts
    /// them all. `connectionString` must already parse (``PostgresRedaction/parse(_:)``).
    /// A string or environment naming a connection service (`service=`, `PGSERVICE`) is not checked: its hosts
    /// come from the service file, so the probe's `hostaddr` list could not be made as long.
    static func problem(_ connectionString: String, secrets: [String]) -> String? {
        if let refused = connectTimeoutProblem(connectionString) {
            return PostgresRedaction.redact(refused, secrets: secrets)
        }
        guard let hosts = hostCount(connectionString) else { return nil }
        let keys = ["dbname", "hostaddr"]
        let values = [connectionString, Array(repeating: probeAddress, count: hosts).joined(separator: ",")]
        let started: OpaquePointer? = withCStringArray(keys) { keys in
            withCStringArray(values) { values in PQconnectStartParams(keys, values, 1) }
        }
        guard let conn = started else { return nil }
        defer { PQfinish(conn) }
        guard PQstatus(conn) == CONNECTION_BAD else { return nil }
        let message = PQerrorMessage(conn).map { String(cString: $0) } ?? ""
        if message.contains("\"\(probeAddress)\"") || message.isEmpty { return nil }
        return PostgresRedaction.redact(message.trimmingCharacters(in: .whitespacesAndNewlines), secrets: secrets)
    }

    /// How many hosts libpq will count (its `count_comma_separated_elems` of `host`, else of `hostaddr`, each
    /// from the string or else the environment's `PGHOST` / `PGHOSTADDR`); 1 when none is set. The probe's
    /// `hostaddr` list must be as long, or libpq refuses the pair (`could not match 2 host names to 1 hostaddr
    /// values`). Nil when a connection service is named.
    static func hostCount(_ connectionString: String) -> Int? {
        let options = parsedOptions(connectionString)
        let environment = ProcessInfo.processInfo.environment
        if options["service"].map({ !$0.isEmpty }) ?? false || environment["PGSERVICE"].map({ !$0.isEmpty }) ?? false {
            return nil
        }
        for value in [options["host"], environment["PGHOST"], options["hostaddr"], environment["PGHOSTADDR"]] {
            if let value, !value.isEmpty { return value.split(separator: ",", omittingEmptySubsequences: false).count }
        }
        return 1
    }

    /// libpq's refusal of a `connect_timeout` (from the string, else `PGCONNECT_TIMEOUT`) that is no integer, in
    /// libpq's words; nil when it is one or unset. libpq checks it only in its blocking connect
    /// (`connectDBComplete`'s `parse_int_param`: an integer with blanks around it), and the worker connects
    /// without blocking, so the start of a connection cannot refuse it for us: left unchecked, a value such as
    /// `10s` would leave every connect without a time limit.
    static func connectTimeoutProblem(_ connectionString: String) -> String? {
        let value = parsedOptions(connectionString)["connect_timeout"] ?? ProcessInfo.processInfo.environment["PGCONNECT_TIMEOUT"]
        guard let value, !value.isEmpty else { return nil }
        if Int32(value.trimmingCharacters(in: .whitespaces)) != nil { return nil }
        return "invalid integer value \"\(value)\" for connection option \"connect_timeout\""
    }

    /// The options `connectionString` sets (a URI or key/value pairs, as `PQconninfoParse` reads them); empty for
    /// a string libpq cannot parse.
    static func parsedOptions(_ connectionString: String) -> [String: String] {
        var options: [String: String] = [:]
        if PostgresRedaction.isConnectionString(connectionString) {
            var errorMessage: UnsafeMutablePointer<CChar>?
            if let parsed = PQconninfoParse(connectionString, &errorMessage) {
                var cursor = parsed
                while let keyword = cursor.pointee.keyword {
                    if let value = cursor.pointee.val { options[String(cString: keyword)] = String(cString: value) }
                    cursor += 1
                }
                PQconninfoFree(parsed)
            }
            if let errorMessage { PQfreemem(errorMessage) }
        }
        return options
    }
}
