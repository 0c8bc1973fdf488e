// PushCrypto module
