import DeliveryCore

/// The keys of the flat FCM `data` map (docs/wire-formats.md: a flat, data-only message; all values strings).
///
/// Pushizo's normalized fields are `on.` + a name without a dot (`on.title`); the app's own `data` keys
/// are `on.d.` + the app's key, unchanged (`count` -> `on.d.count`). Why a prefix for both:
/// - an app key can never collide with a normalized field: after `on.`, a normalized name has no dot
///   and an app key always starts with `d.`;
/// - no key can hit FCM's reserved names (`from`, `message_type`, `collapse_key`, `notification`, and
///   anything starting with `google` or `gcm`; Firebase: "Set up a Firebase Cloud Messaging client app",
///   `DataMessagePayload` reference): every key starts with `on.`;
/// - the Android SDK recognizes a Pushizo push by `on.msgId` among the app's other FCM traffic;
/// - the map stays flat (one string per key), so the app reads `remoteMessage.data["on.d.count"]` without
///   parsing; only `on.actions` and object/array values are JSON text.
/// `on.` mirrors the APNs `on` dictionary. The cost is 5 bytes per app key, counted in the size.
public enum FCMDataLayout {
    /// Prefix of every Pushizo key.
    public static let prefix = "on."
    /// Prefix of the app's own `data` keys.
    public static let appDataPrefix = "on.d."

    /// The signed msgId.
    public static let msgID = "on.msgId"
    public static let campaignID = "on.campaignId"
    /// In the subscriber's language, placeholders filled; absent on a silent push.
    public static let title = "on.title"
    /// Android shows it as the notification's sub-text; absent when the message has none.
    public static let subtitle = "on.subtitle"
    public static let body = "on.body"
    public static let image = "on.image"
    public static let url = "on.url"
    /// JSON text `[{"id","title","url"?}]`.
    public static let actions = "on.actions"
    /// `android_channel_id`, for the SDK's `NotificationCompat.Builder` (on Android 8+ the channel decides
    /// the sound).
    public static let androidChannelID = "on.androidChannelId"
    /// `android_sound`: a `res/raw` name, used by the SDK only without a channel.
    public static let androidSound = "on.androidSound"
    /// `"true"` on a silent push (`content_available: true`); absent otherwise.
    public static let silent = "on.silent"

    /// The key for the app's own `data` key `key`: `on.d.` + `key`.
    public static func appKey(_ key: String) -> String { appDataPrefix + key }

    /// Every entry of a push but its texts (title, subtitle, body), which the caller adds as they fit: the
    /// msgId, campaign, URL, image, actions, `on.silent` on a silent push, else the Android channel and sound,
    /// and the app's `data` under `on.d.`. FCM's `data` map and Push Kit's `data` text both start from it.
    static func entriesBesideTexts(message: NotificationMessage, msgID: String, campaignID: String?) -> [String: String] {
        var entries: [String: String] = [Self.msgID: msgID]
        if let campaignID { entries[Self.campaignID] = campaignID }
        if let url = message.url { entries[Self.url] = url }
        if let image = message.image { entries[Self.image] = image }
        if !message.buttons.isEmpty { entries[actions] = NormalizedFields.actions(message.buttons).jsonText }
        if message.isSilent {
            entries[silent] = "true"
        } else {
            if let channel = message.androidChannelID, !channel.isEmpty { entries[androidChannelID] = channel }
            if let sound = message.androidSound, !sound.isEmpty { entries[androidSound] = sound }
        }
        for (key, value) in NormalizedData.strings(message.data ?? [:]) {
            entries[appKey(key)] = value
        }
        return entries
    }
}
