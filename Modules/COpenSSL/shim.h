#ifndef NH_COPENSSL_SHIM_H
#define NH_COPENSSL_SHIM_H
#include <openssl/hmac.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <openssl/crypto.h>
#include <openssl/bio.h>
#include <openssl/core_names.h>
#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/param_build.h>
#include <openssl/pem.h>

/* P-256 helpers for the push services' keys: what Swift cannot call (EVP_PKEY_Q_keygen is
   variadic) or would need many lines of OSSL_PARAM and EC_POINT handling for. A P-256 public
   point is 65 bytes, uncompressed: 0x04 || X || Y. */

static inline EVP_PKEY *nh_p256_generate(void) {
    return EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
}

/* An EC key on P-256 from a public point (65 bytes) and, when `scalar` is not NULL, a private
   scalar; NULL when the point is not on the curve or the import fails. */
static inline EVP_PKEY *nh_p256_fromdata(const unsigned char *point, size_t length, const BIGNUM *scalar) {
    EVP_PKEY *pkey = NULL;
    EC_GROUP *group = EC_GROUP_new_by_curve_name(NID_X9_62_prime256v1);
    EC_POINT *decoded = group ? EC_POINT_new(group) : NULL;
    OSSL_PARAM_BLD *build = OSSL_PARAM_BLD_new();
    OSSL_PARAM *params = NULL;
    EVP_PKEY_CTX *ctx = EVP_PKEY_CTX_new_from_name(NULL, "EC", NULL);
    if (decoded && build && ctx && EC_POINT_oct2point(group, decoded, point, length, NULL) == 1
        && EC_POINT_is_on_curve(group, decoded, NULL) == 1
        && OSSL_PARAM_BLD_push_utf8_string(build, OSSL_PKEY_PARAM_GROUP_NAME, SN_X9_62_prime256v1, 0)
        && OSSL_PARAM_BLD_push_octet_string(build, OSSL_PKEY_PARAM_PUB_KEY, point, length)
        && (scalar == NULL || OSSL_PARAM_BLD_push_BN(build, OSSL_PKEY_PARAM_PRIV_KEY, scalar))
        && (params = OSSL_PARAM_BLD_to_param(build)) != NULL && EVP_PKEY_fromdata_init(ctx) == 1) {
        if (EVP_PKEY_fromdata(ctx, &pkey, scalar ? EVP_PKEY_KEYPAIR : EVP_PKEY_PUBLIC_KEY, params) != 1) {
            EVP_PKEY_free(pkey);
            pkey = NULL;
        }
    }
    OSSL_PARAM_free(params);
    OSSL_PARAM_BLD_free(build);
    EVP_PKEY_CTX_free(ctx);
    EC_POINT_free(decoded);
    EC_GROUP_free(group);
    return pkey;
}

/* A P-256 key pair from a 32-byte private scalar (1 ≤ d < n); its public point is d·G. */
static inline EVP_PKEY *nh_p256_from_scalar(const unsigned char *bytes, size_t length) {
    EVP_PKEY *pkey = NULL;
    unsigned char point[65];
    EC_GROUP *group = EC_GROUP_new_by_curve_name(NID_X9_62_prime256v1);
    EC_POINT *product = group ? EC_POINT_new(group) : NULL;
    BIGNUM *scalar = BN_bin2bn(bytes, (int)length, NULL);
    if (product && scalar && !BN_is_zero(scalar) && BN_cmp(scalar, EC_GROUP_get0_order(group)) < 0
        && EC_POINT_mul(group, product, scalar, NULL, NULL, NULL) == 1
        && EC_POINT_point2oct(group, product, POINT_CONVERSION_UNCOMPRESSED, point, sizeof point, NULL) == sizeof point) {
        pkey = nh_p256_fromdata(point, sizeof point, scalar);
    }
    BN_clear_free(scalar);
    EC_POINT_free(product);
    EC_GROUP_free(group);
    return pkey;
}

/* The key's public point, uncompressed, into `out` (65 bytes); 1 on success. */
static inline int nh_p256_public_point(const EVP_PKEY *pkey, unsigned char *out) {
    unsigned char encoded[133];
    size_t length = 0;
    int ok = 0;
    EC_GROUP *group = EC_GROUP_new_by_curve_name(NID_X9_62_prime256v1);
    EC_POINT *point = group ? EC_POINT_new(group) : NULL;
    if (point && EVP_PKEY_get_octet_string_param(pkey, OSSL_PKEY_PARAM_PUB_KEY, encoded, sizeof encoded, &length)
        && EC_POINT_oct2point(group, point, encoded, length, NULL) == 1) {
        ok = EC_POINT_point2oct(group, point, POINT_CONVERSION_UNCOMPRESSED, out, 65, NULL) == 65;
    }
    EC_POINT_free(point);
    EC_GROUP_free(group);
    return ok;
}

/* The curve name of an EC key ("prime256v1", "secp384r1"), into `name`; 1 on success. */
static inline int nh_pkey_group_name(const EVP_PKEY *pkey, char *name, size_t size) {
    size_t length = 0;
    return EVP_PKEY_get_utf8_string_param(pkey, OSSL_PKEY_PARAM_GROUP_NAME, name, size, &length);
}

/* An ECDSA signature from DER (what OpenSSL signs) to raw r || s (JOSE), 32 bytes each; 1 on success. */
static inline int nh_ecdsa_der_to_raw(const unsigned char *der, size_t length, unsigned char *raw) {
    const unsigned char *cursor = der;
    ECDSA_SIG *signature = d2i_ECDSA_SIG(NULL, &cursor, (long)length);
    int ok = signature && cursor == der + length
        && BN_bn2binpad(ECDSA_SIG_get0_r(signature), raw, 32) == 32
        && BN_bn2binpad(ECDSA_SIG_get0_s(signature), raw + 32, 32) == 32;
    ECDSA_SIG_free(signature);
    return ok;
}

/* Raw r || s (64 bytes) to DER into `der` (room for 80 bytes); the DER length, or 0. */
static inline int nh_ecdsa_raw_to_der(const unsigned char *raw, unsigned char *der) {
    ECDSA_SIG *signature = ECDSA_SIG_new();
    BIGNUM *r = BN_bin2bn(raw, 32, NULL);
    BIGNUM *s = BN_bin2bn(raw + 32, 32, NULL);
    if (!signature || !r || !s || ECDSA_SIG_set0(signature, r, s) != 1) {
        BN_free(r);
        BN_free(s);
        ECDSA_SIG_free(signature);
        return 0;
    }
    int length = i2d_ECDSA_SIG(signature, NULL);
    if (length > 0 && length <= 80) {
        unsigned char *cursor = der;
        length = i2d_ECDSA_SIG(signature, &cursor);
    } else {
        length = 0;
    }
    ECDSA_SIG_free(signature);
    return length > 0 ? length : 0;
}
#endif
