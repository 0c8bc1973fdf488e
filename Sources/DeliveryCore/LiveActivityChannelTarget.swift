/// The `{"live_activity_channel": "<name>"}` target form (docs/targets.md, "A Live Activity broadcast channel"):
/// the notification goes as one APNs broadcast on the app's channel of that name (`live_activity_channels.name`),
/// to every device subscribed to it, with no per-device expansion. It stands alone: no other target form and no
/// `platforms` beside it (a broadcast reaches iOS devices only, those Apple knows as subscribed).
public struct LiveActivityChannelTarget: Sendable, Equatable {
    /// The target key.
    public static let key = "live_activity_channel"
    /// Longest name, in UTF-8 bytes (the bound `live_activity_channels.name` has).
    public static let maximumNameBytes = 200

    /// The producer's name of the channel.
    public var name: String

    public init(name: String) {
        self.name = name
    }

    /// The channel target of a `notifications.target` document, or nil when it has no `live_activity_channel` key
    /// (another target form: ``AudienceSelection/init(parsing:)``).
    /// - Throws: ``AudienceTargetError`` when the key is there but the name is not a non-empty string of at most
    ///   ``maximumNameBytes`` bytes, or other keys stand beside it.
    public init?(parsing json: JSONValue) throws(AudienceTargetError) {
        guard let members = json.objectValue, let value = members[Self.key] else { return nil }
        if let other = members.keys.sorted().first(where: { $0 != Self.key }) {
            throw AudienceTargetError("\(Self.key) stands alone; remove \"\(other)\"")
        }
        guard let name = value.stringValue, !name.isEmpty else {
            throw AudienceTargetError("\(Self.key) must be a non-empty string")
        }
        guard name.utf8.count <= Self.maximumNameBytes else {
            throw AudienceTargetError("\(Self.key) is longer than \(Self.maximumNameBytes) bytes")
        }
        self.name = name
    }
}
