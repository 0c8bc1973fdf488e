import Testing
@testable import PushCrypto

@Suite struct DigestTests {
    /// RFC 4231 §4.2-4.8 (test case 5, the truncated one, is left out: it tests truncation, not HMAC).
    static let rfc4231: [(key: [UInt8], data: [UInt8], mac: String)] = [
        ([UInt8](repeating: 0x0b, count: 20), Array("Hi There".utf8),
         "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"),
        (Array("Jefe".utf8), Array("what do ya want for nothing?".utf8),
         "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"),
        ([UInt8](repeating: 0xaa, count: 20), [UInt8](repeating: 0xdd, count: 50),
         "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe"),
        (Array(1...25), [UInt8](repeating: 0xcd, count: 50),
         "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b"),
        ([UInt8](repeating: 0xaa, count: 131), Array("Test Using Larger Than Block-Size Key - Hash Key First".utf8),
         "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"),
        ([UInt8](repeating: 0xaa, count: 131),
         Array("This is a test using a larger than block-size key and a larger than block-size data. The key needs to be hashed before being used by the HMAC algorithm.".utf8),
         "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2"),
    ]

    @Test(arguments: 0..<6) func hmacRFC4231(index: Int) {
        let vector = Self.rfc4231[index]
        #expect(hex(HMACSHA256.authenticationCode(key: vector.key, message: vector.data)) == vector.mac)
    }

    /// One keyed context serves every message, from many threads at once, each tag the RFC's: the copy per message
    /// starts from the keyed state, never from what another message left.
    @Test func aKeyedContextServesManyMessagesFromManyThreads() async {
        let keys = Self.rfc4231.map { HMACSHA256.Key($0.key) }
        await withTaskGroup(of: Bool.self) { group in
            for round in 0..<200 {
                let index = round % Self.rfc4231.count
                group.addTask { hex(keys[index].authenticationCode(message: Self.rfc4231[index].data)) == Self.rfc4231[index].mac }
            }
            for await matched in group { #expect(matched) }
        }
        #expect(hex(HMACSHA256.Key([]).authenticationCode(message: [UInt8]()))
            == "b613679a0814d9ec772f95d778c35fc5ff1697c493715653c6c712144292c5ad")
    }

    @Test func hmacEmptyKeyAndMessage() {
        // Known value: HMAC-SHA256 with an empty key over an empty message.
        #expect(hex(HMACSHA256.authenticationCode(key: [], message: [UInt8]()))
            == "b613679a0814d9ec772f95d778c35fc5ff1697c493715653c6c712144292c5ad")
    }

    @Test func constantTimeCompare() {
        let tag = HMACSHA256.authenticationCode(key: [1, 2, 3], message: Array("m".utf8))
        #expect(HMACSHA256.isEqual(tag, tag))
        var flipped = tag
        flipped[31] ^= 1
        #expect(!HMACSHA256.isEqual(tag, flipped))
        #expect(!HMACSHA256.isEqual(tag, Array(tag.prefix(16))))
        #expect(HMACSHA256.isEqual([], []))
    }

    @Test func sha256KnownAnswers() {
        #expect(hex(SHA256.hash(Array("abc".utf8))) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        #expect(hex(SHA256.hash([UInt8]())) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
    }

    @Test func randomBytes() {
        #expect(SecureRandom.bytes(0).isEmpty)
        let a = SecureRandom.bytes(32)
        let b = SecureRandom.bytes(32)
        #expect(a.count == 32)
        #expect(a != b)
    }
}

@Suite struct Base64URLTests {
    @Test func rfc4648Vectors() {
        // RFC 4648 §10 vectors, in the URL-safe alphabet without padding.
        let vectors = ["": "", "f": "Zg", "fo": "Zm8", "foo": "Zm9v", "foob": "Zm9vYg", "fooba": "Zm9vYmE", "foobar": "Zm9vYmFy"]
        for (plain, encoded) in vectors {
            #expect(Base64URL.encode(Array(plain.utf8)) == encoded)
            #expect(Base64URL.decode(encoded) == Array(plain.utf8))
        }
    }

    @Test func urlSafeAlphabet() {
        #expect(Base64URL.encode([0xfb, 0xff, 0xbf]) == "-_-_")
        #expect(Base64URL.decode("-_-_") == [0xfb, 0xff, 0xbf])
        #expect(Base64URL.decode("+/+/") == nil)
    }

    @Test func roundTripsEveryLength() {
        for length in 0..<70 {
            let data = SecureRandom.bytes(length)
            let text = Base64URL.encode(data)
            #expect(!text.contains("="))
            #expect(Base64URL.decode(text) == data)
        }
    }

    @Test func rejectsMalformed() {
        #expect(Base64URL.decode("A") == nil)          // 4n+1 characters
        #expect(Base64URL.decode("Zh") == nil)         // non-zero unused bits ("f" is "Zg")
        #expect(Base64URL.decode("Zm9v YmFy") == nil)  // space
        #expect(Base64URL.decode("Zg==") == [0x66])    // padding tolerated
    }
}
