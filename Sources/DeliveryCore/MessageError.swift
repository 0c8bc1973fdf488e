/// Why a `notifications.message` document cannot be delivered. The worker fails the delivery with reason
/// `invalid_message` and `description` as the detail.
public struct MessageError: Error, CustomStringConvertible, Sendable, Equatable {
    /// An extensible error code (new codes may be added; switch with a `default`).
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private let name: String
        private init(_ name: String) { self.name = name }
        /// The field has the wrong JSON type (e.g. `data` not an object).
        public static let wrongType = Code("wrongType")
        /// The field has the right type but a value outside what it allows (e.g. volume 1.5).
        public static let invalidValue = Code("invalidValue")
        /// A field the message needs is absent (e.g. no `contents` on a visible alert).
        public static let missing = Code("missing")
        public var description: String { name }
    }

    public var code: Code
    /// The offending field with its path in the message, e.g. `ios_critical_sound.volume` or `buttons[1].id`.
    public var field: String
    /// What is wrong, in words.
    public var message: String

    public init(code: Code, field: String, message: String) {
        self.code = code
        self.field = field
        self.message = message
    }

    /// `` `field`: message ``, e.g. ``"`ios_relevance_score`: must be a number between 0 and 1"``.
    public var description: String { "`\(field)`: \(message)" }
}

extension MessageError {
    /// The outcome the worker records for a message that cannot be delivered: `failed` with reason
    /// `invalid_message` and detail `{"field": ..., "message": <description>}`; the subscription is untouched.
    public var outcome: DeliveryOutcome {
        .failed(reason: .invalidMessage, detail: ["field": .string(field), "message": .string(description)], invalidateSubscription: false)
    }
}
