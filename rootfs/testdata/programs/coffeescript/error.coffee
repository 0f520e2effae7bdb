throw new Error 'boom'
