import DeliveryCore
import Postgres

extension PostgresError {
    /// `true` for a statement PostgreSQL refused because of the data it met: SQLSTATE class 22 (data
    /// exception: a value out of range, a bad cast) or class 23 (integrity constraint violation). Retrying the
    /// same statement on the same rows fails the same way, so the row responsible is set aside instead
    /// (PostgreSQL docs, Appendix A "PostgreSQL Error Codes").
    var isDataError: Bool {
        guard code == .queryFailed, let sqlState else { return false }
        return sqlState.hasPrefix("22") || sqlState.hasPrefix("23")
    }

    /// Longest part of PostgreSQL's message kept in a reason: enough to name the problem, never a whole value.
    static let dataErrorMessageLimit = 200

    /// The reason written for a row set aside because of a data error: PostgreSQL's class name, the SQLSTATE
    /// and its primary message (control characters replaced, at most ``dataErrorMessageLimit`` characters),
    /// e.g. `data_exception: SQLSTATE 22008: timestamp out of range`. The `DETAIL` field is left out: it
    /// quotes whole key values. Statements never cast secrets (tokens, keys), so the message cannot quote one.
    var dataErrorReason: String {
        let state = sqlState ?? "?????"
        let kind = (state.hasPrefix("23") ? DeliveryReason.integrityConstraintViolation : .dataException).rawValue
        var message = String(
            String.UnicodeScalarView(
                self.message.unicodeScalars.map { $0.properties.generalCategory == .control ? " " : $0 }))
        if message.count > Self.dataErrorMessageLimit { message = String(message.prefix(Self.dataErrorMessageLimit)) + "…" }
        return "\(kind): SQLSTATE \(state): \(message)"
    }
}
