(format *error-output* "boom~%")
(sb-ext:exit :code 3)
