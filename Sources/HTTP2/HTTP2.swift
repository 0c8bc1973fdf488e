// HTTP2 module
