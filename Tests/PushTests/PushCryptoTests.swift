import Auth
import Foundation
import HubProtocol
import Push
import Testing

@Suite("Push crypto") struct PushCryptoTests {}

extension PushCryptoTests {
    @Suite("Web Push encryption, HKDF and AES-GCM")
    struct Encryption {
        /// RFC 8291 §5 and Appendix A.
        enum RFC8291 {
            static let plaintext = Data("When I grow up, I want to be a watermelon".utf8)
            static let subscriberPrivate = "q1dXpw3UpT5VOmu_cf_v6ih07Aems3njxI-JWgLcM94"
            static let subscriberPublic =
                "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4"
            static let auth = "BTBZMqHH6r4Tts7J_aSIgg"
            static let senderPrivate = "yfWPiYE-n46HLnH0KqZOF1fJJU3MYrct3AELtAQ-oRw"
            static let senderPublic =
                "BP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27mlmlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A8"
            static let salt = "DGv6ra1nlYgDCS1FRnbzlw"
            static let body =
                "DGv6ra1nlYgDCS1FRnbzlwAAEABBBP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27mlmlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A_yl95bQpu6cVPTpK4Mqgkf1CXztLVBSt2Ks3oZwbuwXPXLWyouBWLVWGNWQexSgSxsj_Qulcy4a-fN"
        }

        @Test("RFC 8291's worked example, byte for byte, and back")
        func rfc8291Example() throws {
            let subscriber = try P256Key(privateScalar: bytes(RFC8291.subscriberPrivate))
            let sender = try P256Key(privateScalar: bytes(RFC8291.senderPrivate))
            #expect(subscriber.publicPoint.base64URL == RFC8291.subscriberPublic)
            #expect(sender.publicPoint.base64URL == RFC8291.senderPublic)
            let body = try WebPushEncryption.encrypt(
                RFC8291.plaintext, p256dh: bytes(RFC8291.subscriberPublic), auth: bytes(RFC8291.auth),
                salt: bytes(RFC8291.salt), senderKey: sender)
            #expect(body.base64URL == RFC8291.body)
            let opened = try WebPushEncryption.decrypt(bytes(RFC8291.body), subscriber: subscriber, auth: bytes(RFC8291.auth))
            #expect(opened == RFC8291.plaintext)
        }

        @Test("a round trip with fresh keys, up to the largest message one record carries")
        func roundTrip() throws {
            let subscriber = P256Key.generate()
            let auth = Crypto.randomBytes(16)
            for plaintext in [Data(), Data("hello".utf8), Data(repeating: 0x61, count: WebPushEncryption.maxPlaintext)] {
                let body = try WebPushEncryption.encrypt(plaintext, p256dh: subscriber.publicPoint, auth: auth)
                #expect(body.count == 86 + plaintext.count + 1 + 16)
                #expect(body[16..<21] == Data([0, 0, 0x10, 0, 65]))
                #expect(try WebPushEncryption.decrypt(body, subscriber: subscriber, auth: auth) == plaintext)
                let slice = (Data([9]) + body).dropFirst()
                #expect(try WebPushEncryption.decrypt(slice, subscriber: subscriber, auth: auth) == plaintext)
            }
            #expect(WebPushEncryption.maxPlaintext == 3993)
            let first = try WebPushEncryption.encrypt(Data("x".utf8), p256dh: subscriber.publicPoint, auth: auth)
            let second = try WebPushEncryption.encrypt(Data("x".utf8), p256dh: subscriber.publicPoint, auth: auth)
            #expect(first.prefix(86) != second.prefix(86), "each message has its own salt and sender key")
        }

        @Test("a changed body, a wrong auth secret or a wrong key is refused")
        func tampering() throws {
            let subscriber = P256Key.generate()
            let auth = Crypto.randomBytes(16)
            let body = try WebPushEncryption.encrypt(Data("secret".utf8), p256dh: subscriber.publicPoint, auth: auth)
            var altered = body
            altered[altered.count - 20] ^= 0x01
            #expect(throws: PushCryptoError.self) { try WebPushEncryption.decrypt(altered, subscriber: subscriber, auth: auth) }
            var otherAuth = auth
            otherAuth[0] ^= 0x01
            #expect(throws: PushCryptoError.self) { try WebPushEncryption.decrypt(body, subscriber: subscriber, auth: otherAuth) }
            #expect(throws: PushCryptoError.self) {
                try WebPushEncryption.decrypt(body, subscriber: P256Key.generate(), auth: auth)
            }
            let error = #expect(throws: PushCryptoError.self) {
                try WebPushEncryption.decrypt(body.prefix(90), subscriber: subscriber, auth: auth)
            }
            #expect(error?.message.contains("too short") == true)
        }

        @Test("bad subscriptions and oversized messages are refused with a reason")
        func refusals() throws {
            let point = P256Key.generate().publicPoint
            let auth = Crypto.randomBytes(16)
            let message = Data("m".utf8)
            var offCurve = point
            offCurve[64] ^= 0x01
            let cases: [(p256dh: Data, auth: Data, plaintext: Data, says: String)] = [
                (point.prefix(64), auth, message, "65 bytes"),
                (offCurve, auth, message, "not a point on the P-256 curve"),
                (point, auth.prefix(15), message, "auth secret is 16 bytes"),
                (point, auth, Data(count: WebPushEncryption.maxPlaintext + 1), "at most 3993 bytes"),
            ]
            for item in cases {
                let error = #expect(throws: PushCryptoError.self) {
                    try WebPushEncryption.encrypt(item.plaintext, p256dh: item.p256dh, auth: item.auth)
                }
                #expect(error?.message.contains(item.says) == true, "\(error?.message ?? "") should say \(item.says)")
            }
        }

        @Test("HKDF-SHA256: RFC 5869 test case 1")
        func hkdf() {
            let output = HKDF.sha256(
                salt: hex("000102030405060708090a0b0c"), ikm: Data(repeating: 0x0b, count: 22),
                info: hex("f0f1f2f3f4f5f6f7f8f9"), length: 42)
            #expect(output.hexString == "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865")
        }

        @Test("AES-128-GCM: McGrew and Viega test case 3, and a wrong tag")
        func aesGCM() throws {
            let key = hex("feffe9928665731c6d6a8f9467308308")
            let nonce = hex("cafebabefacedbaddecaf888")
            let plaintext = hex(
                "d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a721c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b391aafd255")
            let sealed = try AESGCM.seal128(key: key, nonce: nonce, plaintext: plaintext)
            let ciphertext =
                "42831ec2217774244b7221b784d0d49ce3aa212f2c02a4e035c17e2329aca12e21d514b25466931c7d8f6a5aac84aa051ba30b396a0aac973d58e091473f5985"
            #expect(sealed.hexString == ciphertext + "4d5c2af327cd64a62cf35abd2ba6fab4")
            #expect(try AESGCM.open128(key: key, nonce: nonce, sealed: sealed) == plaintext)
            var wrongTag = sealed
            wrongTag[wrongTag.count - 1] ^= 0x80
            let error = #expect(throws: PushCryptoError.self) { try AESGCM.open128(key: key, nonce: nonce, sealed: wrongTag) }
            #expect(error?.message.contains("tag does not match") == true)
            #expect(throws: PushCryptoError.self) { try AESGCM.seal128(key: key.prefix(15), nonce: nonce, plaintext: plaintext) }
            #expect(throws: PushCryptoError.self) { try AESGCM.open128(key: key, nonce: nonce, sealed: Data(count: 15)) }
            let empty = try AESGCM.seal128(key: key, nonce: nonce, plaintext: Data())
            #expect(empty.count == 16)
            #expect(try AESGCM.open128(key: key, nonce: nonce, sealed: empty) == Data())
        }
    }
}

extension PushCryptoTests {
    @Suite("Keys, ES256, RS256, JWT and VAPID")
    struct Signatures {
        /// RFC 7515 Appendix A.3: the ES256 example key and its JWS.
        enum RFC7515ES256 {
            static let x = "f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU"
            static let y = "x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"
            static let d = "jpsQnnGQmL-YBIffH1136cspYG6-0iY7X1fCE9-E9LI"
            static let signingInput =
                "eyJhbGciOiJFUzI1NiJ9.eyJpc3MiOiJqb2UiLA0KICJleHAiOjEzMDA4MTkzODAsDQogImh0dHA6Ly9leGFtcGxlLmNvbS9pc19yb290Ijp0cnVlfQ"
            static let signature = "DtEhU3ljbEg8L38VWAfUAqOyKAM6-Xx-F4GawxaepmXFCgfTjDxw5djxLa8ISlSApmWQxfKTUJqPP3-Kg6NU1Q"
        }

        /// RFC 7515 Appendix A.2: the RS256 example key (its JWK written as PKCS#1) and its deterministic signature.
        enum RFC7515RS256 {
            static let pem = """
                -----BEGIN RSA PRIVATE KEY-----
                MIIEowIBAAKCAQEAofgWCuLjybRlzo0tZWJjNiuSfb4p4fAkd/wWJcyQoTbji9k0
                l8W26mPddxHmfHQp+Vaw+4qPCJrcS2mJPMEzP1Pt0Bm4d4QlL+yRT+SFd2lZS+pC
                gNMsD1W/YpRPEwOWvG6b32690r2jZ47soMZo9wGzjb/7OMg0LOL+bSf63kpaSHSX
                ndS5z5rexMdbBYUsLA9e+KXBdQOS+UTo7WTBEMa2R2CapHg665xsmtdVMTBQY4uD
                Zlxvb3qCo5ZwKh9kG4LT6/I5IhlJH7aGhyxXFvUK+DWNmoudF8NAco9/h9iaGNj8
                q2ethFkMLs91kzk2PAcDTW9gb54h4FRWyuXpoQIDAQABAoIBABKucaRpzQorw35S
                bEUAVx8dYXUdZOlJcHtiWQ+dC6V8ljxAHj/PLyzTveyI5QO/xkObCyjIL303l2cf
                UhPu2MFaJdjVzqACXuOrLot/eSFvxjvqVidTtAZExqFRJ9mylUVAoLvhowVWmC1O
                n95fZCXxTUtxNEG1Xcc7m0rtzJKs45J+N/V9DP1edYH6USyPSWGp6wuA+KgHRnKK
                Vf9GRx80JQY7nVNkL17eHoTWEwga+lwi0FEoW9Y7lDtWXYmKBWhUE+U8PGxlJf8f
                40493HDw1WRQ/aSLoS4QTp3rn7gYgeHEvfJdkkf0UMhlknlo53M09EFPdadQ4TlU
                bjqKc50CgYEA4BzEEOtIpmVdVEZNCqS7baC4crd0pqnRH/5IB3jw3bcxGn6QLvnE
                tfdUdiYrqBdss1l58BQ3KhooKeQTa9AB0Hw/Py5PJdTJNPY8cQn7ouZ2KKDcmnPG
                BY5t7yLc1QlQ5xHdwW1VhvKn+nXqhJTBgIPgtldC+KDV5z+y2XDwGUcCgYEAuQPE
                fgmVtjL0Uyyx88GZFF1fOunH3+7cepKmtH4pxhtCoHqpWmT8YAmZxaewHgHAjLYs
                p1ZSe7zFYHj7C6ul7TjeLQeZD/YwD66t62wDmpe/HlB+TnBA+njbglfIsRLtXlnD
                zQkv5dTltRJ11BKBBypeeF6689rjcJIDEz9RWdcCgYAHAp9XcCSrn8wVkMVkKdb7
                DOX4IKjzdahm+ctDAJN4O/y7OW5FKebvUjdAIt2GuoTZ71iTG+7F0F+lP88jtjP4
                U4qe7VHoewl4MKOfXZKTe+YCS1XbNvfgwJ3Ltyl1OH9hWvu2yza7q+d5PCsDzqtm
                27kxuvULVeya+TEdAB1ijQKBgQCH/3r6YrVH/uCWGy6bzV1nGNOdjKc9tmkfOJmN
                54dxdixdpozCQ6U4OxZrsj3FcOhHBsqAHvX2uuYjagqvo3cOj1TRqNocX40omfCC
                Mx3bD1yPPf/6TI2XECva/ggqEY2mYzmIiA5LVVmc5nrybr+lssFKneeyxN2Wq93S
                0iJMdQKBgCGHewxzoa1r8ZMD0LETNrToK423K377UCYqXfg5XMclbrjPbEC3YI1Z
                NqMtuhdBJqUnBi6tjKMF+34Xf0CUN8ncuXGO2CAYvO8PdyCixHX52ybaDjy1FtCE
                6yUXjoKNXKvUm7MWGsAYH6f4IegOetN5NvmUMFStCSkh7ixZLkN1
                -----END RSA PRIVATE KEY-----
                """
            static let signingInput =
                "eyJhbGciOiJSUzI1NiJ9.eyJpc3MiOiJqb2UiLA0KICJleHAiOjEzMDA4MTkzODAsDQogImh0dHA6Ly9leGFtcGxlLmNvbS9pc19yb290Ijp0cnVlfQ"
            static let signature =
                "cC4hiUPoj9Eetdgtv3hF80EGrhuB__dzERat0XF9g2VtQgr9PJbu3XOiZj5RZmh7AAuHIm4Bh-0Qc_lF5YKt_O8W2Fp5jujGbds9uJdbF9CUAr7t1dnZcAcQjbKBYNX4BAynRFdiuB--f_nZLgrnbyTyWzO75vRK5h6xBArLIARNPvkSjtQBMHlb1L07Qe7K0GarZRmB_eSN9383LcOLn6_dO--xi12jzDwusC-eOkHWEsqtFZESc6BfI7noOPqvhJ1phCnvWh6IeYI2w9QOYEUipUTI8np6LbgGY9Fs98rqVt5AXLIhWkWywlVmtVrBp0igcN_IoypGlUPQGe77Rw"
            /// JWT.rs256 of `claims` with header kid "a2", made by Python's json (sort_keys, compact) and cryptography.
            static let jwt =
                "eyJhbGciOiJSUzI1NiIsImtpZCI6ImEyIiwidHlwIjoiSldUIn0.eyJhdWQiOiJodHRwczovL29hdXRoMi5nb29nbGVhcGlzLmNvbS90b2tlbiIsImV4cCI6MTcwMDAwMzYwMCwiaWF0IjoxNzAwMDAwMDAwLCJpc3MiOiJwdXNoQGV4YW1wbGUuaWFtLmdzZXJ2aWNlYWNjb3VudC5jb20iLCJzY29wZSI6Imh0dHBzOi8vd3d3Lmdvb2dsZWFwaXMuY29tL2F1dGgvZmlyZWJhc2UubWVzc2FnaW5nIn0.UIvzZ_e5FXn03cjPz50LIUoGNXc5XznUKNIv_RAQUGORYFaSpBZVQwMtYRLscTcz8tlSNvICm2EeePEhYo-2ZhMqT8oPTBmZlG3bXJYFXQ-K70FV3aKE51av2FkiyS5AJahibaQU4V1iAXeFQKM9WD3IrnZbuG8zuxOe5uQi7TLlkpvZYFD3KrEbUxAIAp0Pbg7GoAmCohG9w8YFkDxuQ0NCiRVvKnx_ATqBdutR10h97p3VSp7_8UvLzlloy00lrvPTDZ1JjK7wKF-CPOGXbh9F5DcLiByhMP19dxiE79W6ftdqzOeRQOCuxxsbHTV6Sl9W3CTZd3gtzMT97PvJaw"
            static let claims: [String: JSONValue] = [
                "iss": .string("push@example.iam.gserviceaccount.com"),
                "scope": .string("https://www.googleapis.com/auth/firebase.messaging"),
                "aud": .string("https://oauth2.googleapis.com/token"), "iat": .number(1_700_000_000), "exp": .number(1_700_003_600),
            ]
        }

        @Test("ES256: a signature verifies; another message, signature or key does not")
        func es256RoundTrip() throws {
            let key = P256Key.generate()
            let message = Data("payload".utf8)
            let signature = try key.signES256(message)
            #expect(signature.count == 64)
            #expect(key.verifyES256(signature, for: message))
            #expect(try P256Key(publicPoint: key.publicPoint).verifyES256(signature, for: message))
            #expect(!key.verifyES256(signature, for: Data("payload!".utf8)))
            var altered = signature
            altered[10] ^= 0x01
            #expect(!key.verifyES256(altered, for: message))
            #expect(!key.verifyES256(signature.prefix(63), for: message))
            #expect(!P256Key.generate().verifyES256(signature, for: message))
            let publicOnly = try P256Key(publicPoint: key.publicPoint)
            #expect(!publicOnly.hasPrivateKey)
            #expect(throws: PushCryptoError.self) { try publicOnly.signES256(message) }
        }

        @Test("ES256: RFC 7515's example key and JWS")
        func es256RFC7515() throws {
            let key = try P256Key(privateScalar: bytes(RFC7515ES256.d))
            #expect(try key.publicPoint == Data([4]) + bytes(RFC7515ES256.x) + bytes(RFC7515ES256.y))
            let verifier = try P256Key(publicPoint: key.publicPoint)
            let input = Data(RFC7515ES256.signingInput.utf8)
            #expect(try verifier.verifyES256(bytes(RFC7515ES256.signature), for: input))
            #expect(try !verifier.verifyES256(bytes(RFC7515ES256.signature), for: input + Data(" ".utf8)))
            #expect(verifier.verifyES256(try key.signES256(input), for: input))
        }

        @Test("ES256 against the openssl command: each verifies the other's signature")
        func es256WithOpenSSL() throws {
            let folder = try TemporaryFolder()
            defer { folder.remove() }
            let key = P256Key.generate()
            let keyFile = try folder.write("key.pem", Data(key.privateKeyPEM.utf8))
            let messageFile = try folder.write("message", Data("signed by both".utf8))
            let ours = try folder.write("ours.der", Self.der(key.signES256(Data("signed by both".utf8))))
            let check = try openssl(["dgst", "-sha256", "-prverify", keyFile, "-signature", ours, messageFile])
            #expect(check.status == 0 && check.output.contains("Verified OK"), "openssl: \(check.output)")
            let theirs = folder.path("theirs.der")
            #expect(try openssl(["dgst", "-sha256", "-sign", keyFile, "-out", theirs, messageFile]).status == 0)
            let signature = try Self.raw(Data(contentsOf: URL(fileURLWithPath: theirs)))
            #expect(key.verifyES256(signature, for: Data("signed by both".utf8)))
        }

        @Test("RS256: RFC 7515's example signature byte for byte, from PKCS#1 and PKCS#8")
        func rs256RFC7515() throws {
            let folder = try TemporaryFolder()
            defer { folder.remove() }
            let pkcs1 = try folder.write("a2.pem", Data(RFC7515RS256.pem.utf8))
            let converted = try openssl(["pkcs8", "-topk8", "-nocrypt", "-in", pkcs1])
            #expect(converted.output.hasPrefix("-----BEGIN PRIVATE KEY-----"))
            let input = Data(RFC7515RS256.signingInput.utf8)
            for pem in [RFC7515RS256.pem, converted.output] {
                let key = try RSAKey(pem: pem)
                let signature = try key.signRS256(input)
                #expect(signature.base64URL == RFC7515RS256.signature)
                #expect(key.verifyRS256(signature, for: input))
                #expect(!key.verifyRS256(signature, for: input + Data(" ".utf8)))
                #expect(!key.verifyRS256(signature.prefix(255), for: input))
            }
        }

        @Test("JWT: sorted keys, unescaped slashes, alg and typ set; equal to an independent encoder's token")
        func jwt() throws {
            let rsa = try RSAKey(pem: RFC7515RS256.pem)
            #expect(try JWT.rs256(header: ["kid": "a2"], claims: RFC7515RS256.claims, key: rsa) == RFC7515RS256.jwt)
            let key = P256Key.generate()
            let token = try JWT.es256(header: ["kid": "K", "alg": "none"], claims: RFC7515RS256.claims, key: key)
            let parts = token.split(separator: ".").map(String.init)
            try #require(parts.count == 3)
            #expect(String(decoding: try bytes(parts[0]), as: UTF8.self) == #"{"alg":"ES256","kid":"K","typ":"JWT"}"#)
            #expect(String(decoding: try bytes(parts[1]), as: UTF8.self).contains(#""aud":"https://oauth2.googleapis.com/token""#))
            #expect(key.verifyES256(try bytes(parts[2]), for: Data("\(parts[0]).\(parts[1])".utf8)))
        }

        @Test("P-256 keys from the openssl command: a PKCS#8 .p8 and a SEC1 key, with their public points")
        func p256FromOpenSSL() throws {
            let folder = try TemporaryFolder()
            defer { folder.remove() }
            let pkcs8 = try openssl(["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"])
            let sec1 = try openssl(["ecparam", "-genkey", "-name", "prime256v1"])
            #expect(pkcs8.output.contains("-----BEGIN PRIVATE KEY-----"))
            #expect(sec1.output.contains("-----BEGIN EC PRIVATE KEY-----"))
            for pem in [pkcs8.output, sec1.output] {
                let key = try P256Key(pem: pem)
                let file = try folder.write("key.pem", Data(pem.utf8))
                let publicDER = try openssl(["ec", "-in", file, "-pubout", "-outform", "DER"], binary: true)
                #expect(publicDER.data.suffix(65) == key.publicPoint)
                let again = try P256Key(pem: key.privateKeyPEM)
                #expect(again.publicPoint == key.publicPoint)
                #expect(key.privateKeyPEM.hasPrefix("-----BEGIN PRIVATE KEY-----"))
                #expect(again.verifyES256(try key.signES256(Data("m".utf8)), for: Data("m".utf8)))
            }
        }

        @Test("P-256 keys: RSA, P-384, public, encrypted and malformed PEM are refused with a reason")
        func p256Refusals() throws {
            let folder = try TemporaryFolder()
            defer { folder.remove() }
            let p384 = try openssl(["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-384"]).output
            let pkcs1 = try folder.write("a2.pem", Data(RFC7515RS256.pem.utf8))
            let rsaPKCS8 = try openssl(["pkcs8", "-topk8", "-nocrypt", "-in", pkcs1]).output
            let p256 = P256Key.generate().privateKeyPEM
            let body = p256.split(separator: "\n").dropFirst().dropLast().joined(separator: "\n")
            let cases: [(pem: String, says: String)] = [
                (RFC7515RS256.pem, "RSA key (BEGIN RSA PRIVATE KEY)"),
                (rsaPKCS8, "an RSA key of 2048 bits"),
                (p384, "an EC key on secp384r1"),
                ("hello", "not a PEM key"),
                ("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n", "BEGIN PUBLIC KEY, not a P-256 private key"),
                ("-----BEGIN ENCRYPTED PRIVATE KEY-----\nAAAA\n-----END ENCRYPTED PRIVATE KEY-----\n", "encrypted"),
                ("-----BEGIN PRIVATE KEY-----\n" + body, "not a PEM key"),
                ("-----BEGIN PRIVATE KEY-----\nnot base64!\n-----END PRIVATE KEY-----\n", "does not decode"),
                ("-----BEGIN PRIVATE KEY-----\n" + body.dropFirst(8) + "\n-----END PRIVATE KEY-----\n", "does not decode"),
            ]
            for item in cases {
                let error = #expect(throws: PushCryptoError.self) { try P256Key(pem: item.pem) }
                #expect(error?.message.contains(item.says) == true, "\(error?.message ?? "") should say \(item.says)")
            }
            let rsaError = #expect(throws: PushCryptoError.self) { try RSAKey(pem: p256) }
            #expect(rsaError?.message.contains("an EC key on prime256v1; an RSA key is needed") == true)
            let sec1Error = #expect(throws: PushCryptoError.self) {
                try RSAKey(pem: "-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----\n")
            }
            #expect(sec1Error?.message.contains("EC key") == true)
        }

        @Test("P-256 public points: the wrong length, form or curve is refused")
        func p256PointRefusals() throws {
            let point = P256Key.generate().publicPoint
            var offCurve = point
            offCurve[40] ^= 0x01
            var compressed = Data([2 + (point[64] & 1)]) + point[1..<33]
            #expect(throws: PushCryptoError.self) { try P256Key(publicPoint: compressed) }
            compressed = Data([0x05]) + point.dropFirst()
            #expect(throws: PushCryptoError.self) { try P256Key(publicPoint: compressed) }
            let error = #expect(throws: PushCryptoError.self) { try P256Key(publicPoint: offCurve) }
            #expect(error?.message.contains("not a point on the P-256 curve") == true)
            #expect(throws: PushCryptoError.self) { try P256Key(privateScalar: Data(count: 32)) }
            #expect(throws: PushCryptoError.self) { try P256Key(privateScalar: Data(repeating: 0xff, count: 32)) }
            #expect(throws: PushCryptoError.self) { try P256Key(privateScalar: Data(repeating: 1, count: 31)) }
            let publicOnly = try P256Key(publicPoint: point)
            #expect(throws: PushCryptoError.self) { try publicOnly.sharedSecret(with: P256Key.generate()) }
        }

        @Test("ECDH: both sides derive the same 32-byte secret")
        func sharedSecret() throws {
            let alice = P256Key.generate()
            let bob = P256Key.generate()
            let secret = try alice.sharedSecret(with: P256Key(publicPoint: bob.publicPoint))
            #expect(secret.count == 32)
            #expect(try bob.sharedSecret(with: alice) == secret)
        }

        @Test("VAPID: the header's JWT verifies with its key, with aud, exp and sub")
        func vapid() throws {
            let key = P256Key.generate()
            let now = Date(timeIntervalSince1970: 1_700_000_000.75)
            let header = try VAPID.authorization(
                origin: "https://push.example.net", subject: "mailto:hub@example.com", key: key, now: now)
            let fields = header.split(separator: " ", maxSplits: 1)
            #expect(fields.first == "vapid")
            let parameters = Dictionary(
                uniqueKeysWithValues: try #require(fields.last).split(separator: ",").map { field in
                    let pair = field.trimmingCharacters(in: .whitespaces).split(separator: "=", maxSplits: 1)
                    return (String(pair[0]), String(pair[1]))
                })
            let k = try #require(parameters["k"])
            let parts = try #require(parameters["t"]).split(separator: ".").map(String.init)
            try #require(parts.count == 3)
            #expect(k == key.publicPoint.base64URL)
            let verifier = try P256Key(publicPoint: bytes(k))
            #expect(verifier.verifyES256(try bytes(parts[2]), for: Data("\(parts[0]).\(parts[1])".utf8)))
            #expect(String(decoding: try bytes(parts[0]), as: UTF8.self) == #"{"alg":"ES256","typ":"JWT"}"#)
            let claims = try JSONDecoder().decode([String: JSONValue].self, from: bytes(parts[1]))
            #expect(claims["aud"] == .string("https://push.example.net"))
            #expect(claims["exp"] == .integer(1_700_043_200), "now + 12 h, whole seconds")
            #expect(claims["sub"] == .string("mailto:hub@example.com"))
            #expect(claims.count == 3)
            let longest = try VAPID.authorization(
                origin: "https://a.example", subject: "https://hub.example", key: key, now: now, lifetime: 24 * 3600)
            #expect(longest.hasPrefix("vapid t="))
            #expect(throws: PushCryptoError.self) {
                try VAPID.authorization(origin: "https://a.example", subject: "mailto:a@b.c", key: key, lifetime: 24 * 3600 + 1)
            }
            #expect(throws: PushCryptoError.self) {
                try VAPID.authorization(origin: "https://a.example", subject: "hub", key: key)
            }
        }

        @Test("VAPID: an endpoint's origin", arguments: [
            ("https://host:8443/path", "https://host:8443"),
            ("https://fcm.googleapis.com/fcm/send/abc:def", "https://fcm.googleapis.com"),
            ("https://Updates.Push.Services.Mozilla.com:443/wpush/v2/x", "https://updates.push.services.mozilla.com"),
            ("http://127.0.0.1:80/push", "http://127.0.0.1"),
            ("http://127.0.0.1:8080/push", "http://127.0.0.1:8080"),
            ("https://[::1]:8443/push", "https://[::1]:8443"),
        ])
        func origin(endpoint: String, origin: String) {
            #expect(VAPID.origin(of: endpoint) == origin)
        }

        @Test(
            "VAPID: no origin for what is not an http(s) URL",
            arguments: ["", "push.example.net/path", "ftp://host/x", "https:///x"])
        func noOrigin(endpoint: String) {
            #expect(VAPID.origin(of: endpoint) == nil)
        }

        /// Raw r || s as DER, as `openssl dgst -verify` wants it.
        static func der(_ raw: Data) -> Data {
            func integer(_ bytes: Data) -> Data {
                var value = Data(bytes.drop { $0 == 0 })
                if value.isEmpty || value[value.startIndex] & 0x80 != 0 { value.insert(0, at: 0) }
                return Data([0x02, UInt8(value.count)]) + value
            }
            let sequence = integer(raw.prefix(32)) + integer(raw.suffix(32))
            return Data([0x30, UInt8(sequence.count)]) + sequence
        }

        /// A DER ECDSA signature (what `openssl dgst -sign` writes) as raw r || s.
        static func raw(_ der: Data) throws -> Data {
            let bytes = [UInt8](der)
            try #require(bytes.count > 8 && bytes[0] == 0x30 && bytes[2] == 0x02)
            let rLength = Int(bytes[3])
            let r = bytes[4..<(4 + rLength)]
            try #require(bytes[4 + rLength] == 0x02)
            let s = bytes[(6 + rLength)..<(6 + rLength + Int(bytes[5 + rLength]))]
            func padded(_ value: ArraySlice<UInt8>) -> Data {
                let trimmed = value.drop { $0 == 0 }
                return Data(repeating: 0, count: 32 - trimmed.count) + trimmed
            }
            return padded(r) + padded(s)
        }
    }
}

private func bytes(_ base64URL: String) throws -> Data {
    try #require(Data(base64URL: base64URL), "not base64url: \(base64URL)")
}

private func hex(_ text: String) -> Data {
    var data = Data()
    var index = text.startIndex
    while index < text.endIndex {
        let next = text.index(index, offsetBy: 2)
        data.append(UInt8(text[index..<next], radix: 16)!)
        index = next
    }
    return data
}

/// Runs the openssl command; its standard output as text (or as bytes with `binary`).
@discardableResult
private func openssl(_ arguments: [String], binary: Bool = false) throws -> (status: Int32, output: String, data: Data) {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
    process.arguments = ["openssl"] + arguments
    let output = Pipe()
    process.standardOutput = output
    process.standardError = binary ? FileHandle.nullDevice : output
    try process.run()
    let data = output.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    return (process.terminationStatus, binary ? "" : String(decoding: data, as: UTF8.self), data)
}

/// A fresh folder for the openssl command's files.
private struct TemporaryFolder {
    let url: URL

    init() throws {
        url = FileManager.default.temporaryDirectory.appendingPathComponent("push-crypto-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    }

    func remove() { try? FileManager.default.removeItem(at: url) }

    func path(_ name: String) -> String { url.appendingPathComponent(name).path }

    func write(_ name: String, _ data: Data) throws -> String {
        try data.write(to: url.appendingPathComponent(name))
        return path(name)
    }
}
