internal import CLibPQ
import Glibc

/// Owns one `PGresult` and frees it with `PQclear` when the last row or result referring to it goes.
///
/// `@unchecked Sendable` is safe: the result is never modified after libpq hands it over, and libpq
/// documents `PGresult` as read-only and freely shareable between threads (libpq docs §34.19
/// "Behavior in Threaded Programs"). Column names and the name-to-index map are built once per result.
///
/// `@usableFromInline` with the few members ``PostgresRow``'s inlinable decoders use, so that callers' decoding
/// is specialized for each value type (no generic metadata lookups per value in a claim of hundreds of rows).
@usableFromInline
final class PostgresResultStorage: @unchecked Sendable {
    let result: OpaquePointer
    let rowCount: Int
    @usableFromInline let columnNames: [String]
    private let columnIndex: [String: Int]

    init(taking result: OpaquePointer) {
        self.result = result
        rowCount = Int(PQntuples(result))
        let columns = Int(PQnfields(result))
        var names: [String] = []
        names.reserveCapacity(columns)
        var index: [String: Int] = [:]
        index.reserveCapacity(columns)
        for column in 0..<columns {
            let name = PQfname(result, Int32(column)).map { String(cString: $0) } ?? ""
            names.append(name)
            // The first of duplicate names wins, as in most drivers.
            if index[name] == nil { index[name] = column }
        }
        columnNames = names
        columnIndex = index
    }

    deinit { PQclear(result) }

    @usableFromInline
    func index(of column: String) -> Int? { columnIndex[column] }

    /// The value's bytes in libpq's buffer, nil for SQL NULL; valid while this storage lives (callers keep it
    /// alive with `withExtendedLifetime` while they read them).
    @usableFromInline
    func bytes(row: Int, column: Int) -> UnsafeBufferPointer<UInt8>? {
        if PQgetisnull(result, Int32(row), Int32(column)) != 0 { return nil }
        guard let pointer = PQgetvalue(result, Int32(row), Int32(column)) else { return nil }
        let length = Int(PQgetlength(result, Int32(row), Int32(column)))
        return UnsafeBufferPointer(start: UnsafeRawPointer(pointer).assumingMemoryBound(to: UInt8.self), count: length)
    }

    @inline(__always)
    func value(row: Int, column: Int) -> String? {
        if PQgetisnull(result, Int32(row), Int32(column)) != 0 { return nil }
        guard let pointer = PQgetvalue(result, Int32(row), Int32(column)) else { return nil }
        return String(cString: pointer)
    }
}

/// The rows of one statement, in text format. A random-access collection of ``PostgresRow``; values are
/// converted to Swift strings only when read.
public struct PostgresQueryResult: Sendable, RandomAccessCollection {
    let storage: PostgresResultStorage?

    /// Rows inserted, updated, deleted, selected, ... as reported in the command tag (`PQcmdTuples`);
    /// 0 for commands without a count.
    public var affectedRows: Int

    /// The result columns' names, in order.
    public var columnNames: [String] { storage?.columnNames ?? [] }

    /// The 0-based index of `column` (the first, if several share the name), for
    /// ``PostgresRow/decode(_:at:)`` in hot loops: look it up once per result instead of once per row.
    public func columnIndex(_ column: String) -> Int? { storage?.index(of: column) }

    /// The command tag, only kept for `COMMIT` (to detect a rollback).
    let commandTag: String?

    init(storage: PostgresResultStorage?, affectedRows: Int, commandTag: String? = nil) {
        self.storage = storage
        self.affectedRows = affectedRows
        self.commandTag = commandTag
    }

    public var startIndex: Int { 0 }
    public var endIndex: Int { storage?.rowCount ?? 0 }

    /// The row at `position` (0-based).
    public subscript(position: Int) -> PostgresRow {
        precondition(position >= 0 && position < endIndex, "PostgresQueryResult: row index out of range")
        return PostgresRow(storage: storage!, row: position)
    }
}

/// One result row. Cheap to copy: it refers to the shared result.
public struct PostgresRow: Sendable {
    @usableFromInline let storage: PostgresResultStorage
    @usableFromInline let row: Int

    init(storage: PostgresResultStorage, row: Int) {
        self.storage = storage
        self.row = row
    }

    /// The result columns' names, in order.
    public var columnNames: [String] { storage.columnNames }

    /// The raw text of `column`, nil for SQL NULL or when there is no such column.
    public subscript(_ column: String) -> String? {
        guard let index = storage.index(of: column) else { return nil }
        return storage.value(row: row, column: index)
    }

    /// The raw text of the column at `index` (0-based), nil for SQL NULL.
    public subscript(index index: Int) -> String? {
        precondition(index >= 0 && index < storage.columnNames.count, "PostgresRow: column index out of range")
        return storage.value(row: row, column: index)
    }

    /// Decodes `column` as `T`. Throws `.decodingFailed` naming the column when it is missing, NULL, or
    /// its text does not parse as `T`.
    @inlinable
    public func decode<T: PostgresDecodable>(_ type: T.Type, _ column: String) throws -> T {
        guard let value = try decodeIfPresent(type, column) else { throw nullError(column: column, expected: "\(T.self)") }
        return value
    }

    /// Decodes the column at `index` (see ``PostgresQueryResult/columnIndex(_:)``) as `T`. Throws
    /// `.decodingFailed` naming the column when it is NULL or its text does not parse as `T`.
    @inlinable
    public func decode<T: PostgresDecodable>(_ type: T.Type, at index: Int) throws -> T {
        guard let value = try decodeIfPresent(type, at: index) else {
            throw nullError(column: columnName(index), expected: "\(T.self)")
        }
        return value
    }

    /// Decodes the column at `index` as `T`, nil for SQL NULL. Throws `.decodingFailed` naming the column
    /// when the index is out of range or its text does not parse as `T`.
    @inlinable
    public func decodeIfPresent<T: PostgresDecodable>(_ type: T.Type, at index: Int) throws -> T? {
        guard let bytes = try bytes(at: index) else { return nil }
        do {
            return try withExtendedLifetime(storage) { try T(postgresBytes: bytes) }
        } catch let error as PostgresError {
            throw named(error, column: index)
        }
    }

    /// Decodes the column at `index` as `T` like ``decodeIfPresent(_:at:)``, but returns `last`'s value
    /// itself when the column holds the same bytes as when `last` was decoded, and keeps the new bytes and
    /// value in `last` otherwise. For columns that repeat down a result (an app's channel settings and
    /// signing key on each of its claimed deliveries): one comparison instead of a new copy per row.
    @inlinable
    public func decodeIfPresent<T: PostgresDecodable>(
        _ type: T.Type, at index: Int, repeating last: inout PostgresRepeatedValue<T>
    ) throws -> T? {
        guard let bytes = try bytes(at: index) else { return nil }
        return try withExtendedLifetime(storage) {
            if let value = last.value, last.holds(bytes) { return value }
            do {
                let value = try T(postgresBytes: bytes)
                last = PostgresRepeatedValue(raw: Array(bytes), value: value)
                return value
            } catch let error as PostgresError {
                throw named(error, column: index)
            }
        }
    }

    /// The bytes of the column at `index` (nil for SQL NULL), valid while ``storage`` lives.
    /// - Throws: `.decodingFailed` when the result has no column at `index`.
    @usableFromInline
    func bytes(at index: Int) throws -> UnsafeBufferPointer<UInt8>? {
        guard index >= 0 && index < storage.columnNames.count else {
            throw PostgresError(code: .decodingFailed, message: "no column at index \(index) (the result has \(storage.columnNames.count))")
        }
        return storage.bytes(row: row, column: index)
    }

    @usableFromInline
    func columnName(_ index: Int) -> String { storage.columnNames[index] }

    @usableFromInline
    func named(_ error: PostgresError, column index: Int) -> PostgresError {
        var error = error
        error.message = "column \"\(columnName(index))\": " + error.message
        return error
    }

    @usableFromInline
    func nullError(column: String, expected: String) -> PostgresError {
        PostgresError(code: .decodingFailed, message: "column \"\(column)\" is NULL; expected \(expected)")
    }

    /// Decodes `column` as `T`, nil for SQL NULL. Throws `.decodingFailed` naming the column when it is
    /// missing or its text does not parse as `T`.
    @inlinable
    public func decodeIfPresent<T: PostgresDecodable>(_ type: T.Type, _ column: String) throws -> T? {
        try decodeIfPresent(type, at: try index(of: column))
    }

    /// The index of `column`. - Throws: `.decodingFailed` when the result has no such column.
    @usableFromInline
    func index(of column: String) throws -> Int {
        guard let index = storage.index(of: column) else {
            throw PostgresError(
                code: .decodingFailed,
                message: "no column \"\(column)\" in the result (columns: \(storage.columnNames.joined(separator: ", ")))")
        }
        return index
    }
}

/// The last value ``PostgresRow/decodeIfPresent(_:at:repeating:)`` decoded from a column, with the bytes it
/// came from. Start with `PostgresRepeatedValue()` per column and result.
public struct PostgresRepeatedValue<T> {
    @usableFromInline var raw: [UInt8]
    @usableFromInline var value: T?

    public init() {
        raw = []
        value = nil
    }

    /// Whether `bytes` are the bytes ``value`` came from: one `memcmp` (the generic `elementsEqual` compared
    /// them a byte at a time, 1.6% of a broadcast drain's CPU for an app's settings on every claimed row).
    @usableFromInline
    func holds(_ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        guard raw.count == bytes.count else { return false }
        guard let other = bytes.baseAddress, !raw.isEmpty else { return true }
        return raw.withUnsafeBufferPointer { memcmp($0.baseAddress!, other, raw.count) == 0 }
    }

    @usableFromInline
    init(raw: [UInt8], value: T) {
        self.raw = raw
        self.value = value
    }
}
